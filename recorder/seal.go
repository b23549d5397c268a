package recorder

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/stockade/stockade/spec"
)

// endRecordSize is an end record's size on disk: framing and its three
// totals.
const endRecordSize = recOverhead + 24

// Unsealed lists the processes whose recording has no end record: running
// or suspended processes, and those whose runtime died between journaling
// the exit and writing the end record (which follows the journaled exit).
// It reads one directory and the last bytes of each recording's last
// segment, so a runtime can run it at every Open. A recording whose last
// segment cannot be read is listed (its Resume will say why).
func (s *Store) Unsealed() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "listing %s", s.dir)
	}
	last := map[string]uint64{} // the last segment's number per recording
	for _, e := range ents {
		name := e.Name()
		if id, ok := strings.CutSuffix(name, ".rec"); ok && validID(id) == nil {
			if _, seen := last[id]; !seen {
				last[id] = 0
			}
			continue
		}
		i := strings.LastIndex(name, ".rec.")
		if i < 0 || validID(name[:i]) != nil {
			continue
		}
		if n, err := strconv.ParseUint(name[i+len(".rec."):], 10, 64); err == nil && n > last[name[:i]] {
			last[name[:i]] = n
		}
	}
	var ids []string
	for id, n := range last {
		name := headName(s.dir, id)
		if n > 0 {
			name = tailName(s.dir, id, n)
		}
		if !endsSealed(name) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// endsSealed reports whether the file ends with a whole, valid end record.
func endsSealed(name string) bool {
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }() // only read
	fi, err := f.Stat()
	if err != nil || fi.Size() < headerSize+endRecordSize {
		return false
	}
	b := make([]byte, endRecordSize)
	if _, err := f.ReadAt(b, fi.Size()-endRecordSize); err != nil && err != io.EOF {
		return false
	}
	return b[0] == TypeEnd && binary.BigEndian.Uint32(b[1:5]) == 24 &&
		binary.BigEndian.Uint32(b[endRecordSize-4:]) == crc32.Checksum(b[:endRecordSize-4], castagnoli)
}

// Seal ends process id's recording after its runtime died between
// journaling the process's exit and writing the end record, or a process a
// recovery ended without its stream: it resumes the
// recording, sets the journaled totals, marks as lost the output the
// journal counts but the recording does not hold (none, when the output was
// synced before the exit as the runtime does), and writes the end record.
// It returns the bytes marked lost.
func (s *Store) Seal(id string, stdout, stderr int64) (lost int64, err error) {
	rec, off, err := s.Resume(id, spec.Record{})
	if err != nil {
		return 0, err
	}
	if rec == nil {
		return 0, nil
	}
	if total := stdout + stderr; total > off {
		if _, err := rec.Gap(total - off); err != nil {
			_ = rec.Suspend() // the Gap error is the one to report; Suspend only releases the file
			return 0, err
		}
		lost = total - off
	}
	if stdout+stderr >= off {
		// Fewer than the recording holds: the journal's counts are the
		// older word (a process given up as lost); keep the recording's.
		rec.SetTotals(stdout, stderr)
	}
	return lost, rec.Close()
}

package rerun

import (
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/statedir"
)

// Files is Recordings over the files the recorder keeps beside the journal
// at journalPath: read without the journal's lock, so it serves a re-run
// through a server that holds the journal, an embedded runtime, or a
// journal no runtime holds.
func Files(journalPath string) Recordings { return files{dir: statedir.Recordings(journalPath)} }

type files struct{ dir string }

func (f files) Output(id string) (stdout, stderr []byte, whole bool, err error) {
	gaps := false
	sum, err := recorder.Read(f.dir, id, func(ch recorder.Chunk) error {
		switch ch.Stream {
		case recorder.TypeStdout:
			stdout = append(stdout, ch.Data...)
		case recorder.TypeStderr:
			stderr = append(stderr, ch.Data...)
		default:
			gaps = true
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, err
	}
	return stdout, stderr, sum.Complete && !gaps, nil
}

func (f files) Stdin(id string) ([]byte, bool, error) { return recorder.ReadStdin(f.dir, id) }

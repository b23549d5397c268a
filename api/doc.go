// Package api holds the stockade server's protobuf API: one directory per
// versioned protobuf package (stockade/v1), each with its .proto files and
// their committed generated Go code.
package api

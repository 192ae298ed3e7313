// Package queries holds Hopper's annotated SQL: every statement the queue
// runs, one file per concern, compiled by sqlc into package db. The tests
// in this folder pin down each query's semantics against a real PostgreSQL.
package queries

import "embed"

// Files holds the .sql files of this version, for `hopper sql export` and
// for applications that compile Hopper's queries into their own sqlc build.
//
//go:embed *.sql
var Files embed.FS

// License is Hopper's licence (MIT, the repository's LICENSE), which
// `hopper sql export` writes beside the files it copies: the licence asks
// that its notice go with every copy.
//
//go:embed LICENSE
var License []byte

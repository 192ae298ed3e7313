// Package schema creates and upgrades Hopper's tables in PostgreSQL. It
// embeds the migration files of this version of Hopper (Files; sqlc reads
// the same ones to type the queries) and applies them with golang-migrate,
// recording the version in a table of its own (MigrationsTable), so an
// application that migrates its own tables with golang-migrate keeps its
// own state beside it.
//
// Create the tables when your program starts; being up to date already is
// not an error:
//
//	if err := schema.Up(ctx, pool); err != nil { // to Latest()
//		log.Fatal(err)
//	}
//
// The tables are found, and created, through the pool's search_path, or in
// the schema the Name option names:
//
//	err := schema.Up(ctx, pool, schema.Name("jobs"), schema.Logf(log.Printf))
//
// A Migrator gives finer control: Version, Down and, after a hand repair,
// Force. The `hopper migrate` command does the same from a shell.
//
// Upgrade the schema before rolling out workers of a newer Hopper: every
// entry point of a build newer than its schema refuses to work, with an
// error that matches jobs.ErrNotMigrated and says what to run.
//
// The guide docs/schema.md describes every table, index and query, and
// what each guarantees.
package schema

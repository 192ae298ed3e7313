// Package hoppertest helps you test your own code that uses Hopper: run a
// handler without a worker or a database, assert what a request enqueued,
// and give each test a freshly migrated schema of its own.
//
// # Running a handler
//
// Work runs one handler on one payload as a worker would: the payload
// goes through JSON and the kind's decoding (upgrades included), the
// handler gets a context in which worker.ExtendLease and worker.AckTx are
// recorded rather than run, a panic is recovered, and the returned error
// is read as the worker reads it (worker.Judge):
//
//	res := hoppertest.Work(ctx, SendWelcome, handler, Welcome{UserID: 7})
//	if res.Outcome != worker.OutcomeSnoozed { … }
//
// Options present the job as a later attempt (Attempt, MaxAttempts), with
// metadata (Metadata) or a given id (ID).
//
// # What a request enqueued
//
// RequireEnqueued, RequireNotEnqueued and RequireManyEnqueued read the
// live jobs of a kind through the operations API, on a pool or on the very
// transaction the code under test used (so they see its jobs before it
// commits), narrowed by Queue, UniqueKey and Where (a condition on the
// typed payload). They fail the test with what they found.
//
//	jobs := hoppertest.RequireEnqueued(t, tx, SendWelcome,
//		hoppertest.Where(func(w Welcome) bool { return w.UserID == 7 }))
//
// # A schema per test
//
// Schema creates a schema with a random name, applies Hopper's
// migrations, and returns a pool whose search_path leads there; the
// schema is dropped when the test ends.
//
// The helpers take a TB, which *testing.T and *testing.B satisfy. The
// package depends on nothing beyond Hopper's own dependencies.
//
// The guide docs/testing.md walks through a complete test file, and how
// to run a whole worker in a test when you need one.
package hoppertest

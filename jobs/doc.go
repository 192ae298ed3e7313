// Package jobs is the typed layer of Hopper: job kinds with typed,
// versioned payloads, and enqueueing that commits or rolls back with your
// own writes.
//
// # Defining a kind
//
// A kind pairs a stable name with a Go payload type. Define it once, at
// package level:
//
//	type Welcome struct {
//		UserID int64 `json:"user_id"`
//	}
//
//	var WelcomeEmail = jobs.MustDefine[Welcome]("welcome_email",
//		jobs.Defaults(jobs.Queue("email"), jobs.MaxAttempts(10)),
//	)
//
// The name is stored with every job and is how workers find the handler:
// never rename a kind that has jobs in flight. MustDefine panics on an invalid
// definition (Define returns the error), so mistakes stop the program at
// start.
//
// # Enqueueing
//
// Enqueue takes the same small interface sqlc generates (DBTX): a
// *pgxpool.Pool, a *pgx.Conn, a pgx.Tx, or the transaction your own sqlc
// code runs on. Given a transaction, the job is inserted in it and commits
// or rolls back with your business data; workers are woken when it commits.
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	userID := createUser(ctx, tx)
//	res, err := WelcomeEmail.Enqueue(ctx, tx, Welcome{UserID: userID}, jobs.Delay(time.Minute))
//	...
//	tx.Commit(ctx)
//
// Hopper's tables are found through the connection's search_path. Where it
// cannot be set (PgBouncer in transaction mode refuses it in the
// connection string), InSchema names the schema per statement:
//
//	jobsDB, err := jobs.InSchema(pool, "jobs")
//	res, err := WelcomeEmail.Enqueue(ctx, jobsDB, Welcome{UserID: 7})
//
// Options: Queue, Priority (0 runs first, 9 last; default 0), RunAt, Delay,
// MaxAttempts (default 25) and UniqueKey. With a unique key, the enqueue is
// a no-op while a live job (pending, scheduled or running) holds the key,
// and Result.Duplicate says so, with the holder's id. UniqueStates and
// UniquePeriod make finished jobs hold the key too ("at most once an
// hour"), ReplaceWaiting and Debounce give a waiting holder the new
// payload (Result.Replaced; Result.Outcome says inserted, replaced or
// kept), and a kind can derive the key from the payload (UniqueBy,
// UniqueFields). ConcurrencyKey (or a
// kind's KeyBy, which derives it from the payload) puts the job under a
// concurrency key, for the workers' flow control: per-key limits, rate
// limits per key and fair queues (see worker.FlowControl). Sequence (or a
// kind's SequenceBy) puts the job in a sequence: the jobs of one key run
// one at a time, in the order their enqueues committed, the ones behind
// the head waiting (StateWaiting) until its end passes them the turn; a
// head that ends dead or cancelled blocks its sequence unless
// SequenceOnDead says SequenceContinue (see docs/sequences.md).
//
// A Workflow is a set of steps enqueued together (EnqueueWorkflow), each
// a job of any kind made by Kind.Entry, each running after the steps it
// names (After): a step with parents waits until they have all ended,
// and the transaction that ends the last one makes it ready. A failed
// parent cancels its dependents unless OnParentFailure says otherwise;
// NewBatch makes a batch with a callback; EnqueueWorkflows enqueues many
// workflows in one call; Parents, ParentResult and CountParents are a
// step's view of its parents (see docs/workflows.md).
//
// EnqueueMany inserts a batch of one kind; EnqueueBatch a batch of any
// kinds (each entry made with Kind.Entry). A plain batch of up to 256 jobs
// is a single INSERT, one round trip like Enqueue; a larger one reserves
// its ids (one round trip), then goes through COPY (the fast path: well
// over 100,000 jobs per second); a batch where any job has a unique key is
// a single INSERT … ON CONFLICT DO NOTHING, and one whose keys are held by
// more than live jobs (UniqueStates, UniquePeriod, ReplaceWaiting,
// Debounce) a lock on its keys, then one statement (one per repetition of
// a key), pipelined in the same round trip.
// Either way every item is
// validated before anything is written, the batch is all or nothing,
// workers get one wake-up per queue for the whole batch, and the result
// has one entry per job, in order: its id, or for a duplicate the id of
// the job holding its key. A plain batch computes a delayed job's run_at
// with this process's clock; everything else uses the database's.
//
// # Metadata and enqueue hooks
//
// A job carries Meta, string tags set with Metadata (or a kind's Defaults)
// and seen by its handler as Job.Meta; the dead table and the history keep
// it. Enqueue hooks see, and may change, every job before it is inserted,
// in the caller's context and transaction: UseEnqueue registers them for
// every kind (the hopperotel module's writes the trace context into the
// metadata), OnEnqueue for one kind. With none registered, an enqueue does
// no extra work.
//
// # Stored jobs
//
// Row is a job as Hopper stores it, in any State (pending, scheduled,
// running, completed, dead, cancelled), with its payload still JSON; the
// operations API (package hopper) returns rows, and a kind's Decode makes
// the typed Job of one. DBTX is what enqueueing and the operations run on:
// the methods sqlc's generated DBTX has, so a pool, a connection, a
// transaction or your own sqlc code's transaction all fit.
//
// Bad input is refused before anything is written, with errors that say
// what was wrong and match with errors.Is: ErrInvalidQueue,
// ErrInvalidPriority, ErrInvalidMaxAttempts, ErrInvalidRunAt,
// ErrInvalidUniqueKey, ErrInvalidConcurrencyKey, ErrInvalidSequenceKey,
// ErrMarshal, ErrPayloadTooLarge (1 MiB unless the
// kind sets MaxPayloadBytes).
//
// # Changing a payload: versions and upgrades
//
// Jobs outlive deploys. When a payload's shape changes, bump the kind's
// version and register how the previous version's JSON becomes the new
// one:
//
//	var WelcomeEmail = jobs.MustDefine[Welcome]("welcome_email",
//		jobs.Version(2),
//		jobs.Upgrade(1, jobs.Convert(func(old WelcomeV1) (Welcome, error) { … })),
//	)
//
// Every job is stored with the version it was enqueued at. A worker
// upgrades an older payload through the chain (1→2→…→current) before
// decoding it into T, so handlers only ever see the current type. A worker
// never claims a payload newer than its build understands: during a rolling
// deploy, old workers leave new jobs to new workers. A payload that cannot
// be upgraded or decoded is a permanent failure (ErrUndecodable): the
// worker moves it to the dead table at once, with the reason, without
// burning retries.
//
// The chain must be contiguous from 1 to the current version; Define checks
// it. Keep old payload structs (WelcomeV1, …) and golden JSON fixtures of
// each version in your tests, so a change that alters the stored JSON
// without a new version is caught.
//
// # Encrypted payloads
//
// A kind defined with Encrypted(keyring) stores its payloads encrypted
// (AES-256-GCM), and its durable steps' results with them; a worker
// decrypts them before the upgrades. NewKeyring holds named keys, one
// current: add a key to rotate, drop the old one once no stored value
// names it. The keys a kind derives from its payload (UniqueBy,
// UniqueFields, KeyBy, SequenceBy), its metadata and its errors stay in
// the clear. A payload that cannot be decrypted wraps ErrDecrypt and is
// dead at once, as an undecodable one is.
//
// # What handlers receive
//
// A handler gets a *Job[T]: the decoded Payload and the job's metadata (ID,
// Queue, Kind, stored Version, Attempt, MaxAttempts, CreatedAt, RunAt and
// the error history of earlier attempts). The worker package runs them.
//
// The guide docs/jobs.md covers defining kinds, enqueue options,
// transactions and batches, unique keys, metadata, payload versions,
// encrypted payloads and hooks with runnable programs.
package jobs

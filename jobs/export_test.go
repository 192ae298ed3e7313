package jobs

// MaxInsertBatch is the largest plain batch sent as one INSERT; one more
// job goes by COPY.
const MaxInsertBatch = maxInsertBatch

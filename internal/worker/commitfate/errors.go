package commitfate

import "errors"

// ErrUnknown is what a write whose commit's outcome is unknown wraps where
// a user sees it (worker.ErrCommitUnknown is this error).
var ErrUnknown = errors.New("hopper: commit outcome unknown")

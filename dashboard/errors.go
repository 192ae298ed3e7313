package dashboard

import "errors"

// The dashboard's errors, to match with errors.Is.

// ErrNoAuth is returned by New for a dashboard that could change the queue
// with nobody checking who asks: set Token, ReadOnly, or OwnAuth.
var ErrNoAuth = errors.New("hopper: dashboard: no token and not read-only")

// ErrUnusedToken is returned by New for a Token that would protect
// nothing: with ReadOnly every change is refused, and reads need no token
// unless ProtectReads says so. Refused rather than ignored, so that
// nobody believes a dashboard guarded that is not.
var ErrUnusedToken = errors.New("hopper: dashboard: a token with ReadOnly protects nothing (every change is refused, and reads need no token): drop it, or set ProtectReads")

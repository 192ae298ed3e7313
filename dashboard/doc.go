// Package dashboard is Hopper's web dashboard: an http.Handler that a Go
// service can mount under its own mux and auth, and what `hopper ui`
// serves on 127.0.0.1. Server-rendered with html/template; its styles,
// script and charts (inline SVG) are embedded: no build step, no CDN.
//
//	d, err := dashboard.New(dashboard.Config{DB: pool, Token: token,
//		AllowedHosts: []string{"ops.example.com"}}) // the names it is served under
//	go d.Run(ctx) // samples the queues for the overview's charts
//	mux.Handle("/jobs/", http.StripPrefix("/jobs", d))
//
// # Pages
//
// The overview (per queue: ready, scheduled, running, dead, cancelled,
// claim lag, paused; charts of depth, claim lag and completions over the
// last hour; it refreshes itself every 5 seconds without a reload); the
// jobs list with filters (queue, kind, state, age) and keyset paging; a
// job in full (payload pretty-printed, version, metadata, attempts, the
// error history with stacks; cancel, retry); dead-letter triage (retry or
// purge selected jobs, retry a kind); queue pause and resume; schedules
// (pause, resume, fire now); workers (host, queues, jobs held, last
// beat, alive or gone), with the release of a gone worker's jobs in
// one click and, from a page that says what it risks (each job may run
// twice at once), the forced release of a live one's.
//
// # A sharded Hopper
//
// NewSharded serves the dashboard of a sharded Hopper (package shard, on
// a Citus coordinator): a page of every shard (its node, migration version
// and jobs by state) with a job id lookup that opens the job in its shard,
// and under s/<shard>/ each shard's whole dashboard, as New serves it on
// the shard's schema, with a link back. One Config guards every page the
// same way; a shard's cancel goes through the ShardSet (shard.Set), which
// tells the job's worker through the coordinator.
//
// # Safety
//
// Reading needs nothing unless ProtectReads is set (then every page needs
// the Token too, the static files aside); a change needs the Token (opened
// once as ?token=…, then kept in an HttpOnly SameSite=Strict cookie, and
// the browser is sent to the same page without it; programs send
// "Authorization: Bearer …"), unless the mounting service authenticates
// requests itself (OwnAuth). ReadOnly refuses every change; a Token with
// ReadOnly needs ProtectReads, or New refuses it (ErrUnusedToken): it
// would guard nothing. Every form carries a CSRF token derived from the
// browser's session (only the Token as a bearer token exempts a request
// from it), and cross-origin state-changing requests are refused by the
// standard library's http.CrossOriginProtection. Cookies are scoped to the
// dashboard's mount point and Secure over TLS. What a change did is shown
// once, from a short-lived signed cookie, never from the URL.
// html/template escapes payloads, metadata and error messages, and names
// that become a path segment are path-escaped; pages carry a
// Content-Security-Policy that allows only the dashboard's own script and
// no framing (with X-Frame-Options: DENY). Every request, static files
// included, is answered only when its Host is localhost, an IP address or
// a name in Config.AllowedHosts, else 421 Misdirected Request: a page that
// points its own name at the dashboard's address (DNS rebinding) cannot
// read it. Links, the <base> and redirects are relative, so the dashboard
// works behind a proxy that strips a prefix. The dashboard never sees a
// connection string. Bad input (unknown ids, malformed filters and
// cursors, bodies over 64 KiB) gets a 4xx page with one sentence; a
// server-side failure a 500 page without a stack (the error is logged).
package dashboard

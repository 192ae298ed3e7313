package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ServerInfo is the PostgreSQL server a run measured and the settings that
// decide what its figures mean.
type ServerInfo struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
	// PgStatStatements: the extension's library is loaded
	// (shared_preload_libraries), so claims can be measured in buffers.
	PgStatStatements bool `json:"pg_stat_statements"`
	// ScratchCluster: the run started this server itself (initdb defaults,
	// plus pg_stat_statements for measurement only).
	ScratchCluster bool `json:"scratch_cluster,omitempty"`
	// Warnings say why the figures may not be what users will see (for
	// example autovacuum off).
	Warnings []string `json:"warnings,omitempty"`
}

// serverSettings are the settings that change a queue's figures: vacuum,
// durability (commit cost), memory and WAL sizing.
var serverSettings = []string{
	"autovacuum", "autovacuum_naptime", "autovacuum_vacuum_cost_delay",
	"synchronous_commit", "fsync", "full_page_writes",
	"shared_buffers", "max_wal_size", "work_mem", "max_connections",
	"shared_preload_libraries",
}

// readServer reads the server's version and settings, in the units a
// person would write them (current_setting gives '128MB', not 16384 pages).
func readServer(ctx context.Context, dbURL string) (*ServerInfo, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("bench: read server settings: %w", err)
	}
	defer conn.Close(ctx)
	s := &ServerInfo{Settings: map[string]string{}}
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&s.Version); err != nil {
		return nil, fmt.Errorf("bench: read server settings: %w", err)
	}
	// current_setting(name, true) is NULL, not an error, for a setting this
	// server does not have.
	rows, err := conn.Query(ctx, "SELECT name, current_setting(name, true) FROM unnest($1::text[]) AS name", serverSettings)
	if err != nil {
		return nil, fmt.Errorf("bench: read server settings: %w", err)
	}
	for rows.Next() {
		var name string
		var value *string
		if err := rows.Scan(&name, &value); err != nil {
			rows.Close()
			return nil, fmt.Errorf("bench: read server settings: %w", err)
		}
		if value != nil {
			s.Settings[name] = *value
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bench: read server settings: %w", err)
	}
	s.PgStatStatements = slices.ContainsFunc(strings.Split(s.Settings["shared_preload_libraries"], ","),
		func(lib string) bool { return strings.Trim(strings.TrimSpace(lib), `"`) == "pg_stat_statements" })
	s.Warnings = serverWarnings(s.Settings)
	return s, nil
}

// serverWarnings names the settings under which the figures are not what a
// production server shows.
func serverWarnings(settings map[string]string) []string {
	var w []string
	if settings["autovacuum"] == "off" {
		w = append(w, "autovacuum is off: dead tuples pile up and the figures fall over time; not what a production server shows")
	}
	if settings["fsync"] == "off" {
		w = append(w, "fsync is off: commits skip the disk flush and look cheaper than on a production server (and a crash can corrupt the data)")
	}
	if settings["synchronous_commit"] == "off" {
		w = append(w, "synchronous_commit is off: commits do not wait for the WAL flush and look cheaper than production defaults")
	}
	return w
}

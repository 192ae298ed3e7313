package schema

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	hopperdb "github.com/hopperq/hopper/db"
)

// buildsVersion is the migration that made hopper_migration_builds.
const buildsVersion = 30

// recordTimeout bounds the write of a run's record once the run is over,
// whether or not the caller's context has ended.
const recordTimeout = 10 * time.Second

// MigrationBuild is the build of Hopper that applied a migration, as its
// migrator recorded it in hopper_migration_builds (from migration 30 on).
type MigrationBuild struct {
	// Version is the migration's.
	Version uint
	// HopperVersion is the Hopper module version of the build, as
	// `hopper version` prints it ("v1.2.0").
	HopperVersion string
	// Program is the main package of the program that migrated
	// ("github.com/hopperq/hopper/cmd/hopper" for the CLI).
	Program string
	// Revision is the commit the program was built from, "" when the build
	// recorded none; Modified, whether its checkout had uncommitted
	// changes; CommitTime, the commit's time (zero when unknown).
	Revision   string
	Modified   bool
	CommitTime time.Time
	// Go is the Go release that built it.
	Go string
	// AppliedBy is the role that ran the migration; AppliedAt, when it
	// was recorded, by the database's clock.
	AppliedBy string
	AppliedAt time.Time
}

// Builds returns which build applied each migration, oldest first: the
// migrations applied by a Hopper migrator from migration 30 on. A
// migration applied before that, or by an older release, has no entry;
// a schema below version 30 has none at all.
func (mg *Migrator) Builds(ctx context.Context) ([]MigrationBuild, error) {
	version, _, err := mg.Version()
	if err != nil || version < buildsVersion {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, &mg.connCfg)
	if err != nil {
		return nil, fmt.Errorf("migrate: builds: connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := hopperdb.New(conn).ListMigrationBuilds(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: builds: %w", err)
	}
	out := make([]MigrationBuild, 0, len(rows))
	for _, r := range rows {
		b := MigrationBuild{Version: uint(r.Version), HopperVersion: r.HopperVersion, Program: r.Program, Revision: r.Revision,
			Modified: r.VcsModified, Go: r.GoVersion, AppliedBy: r.AppliedBy, AppliedAt: r.AppliedAt}
		if r.VcsTime != nil {
			b.CommitTime = *r.VcsTime
		}
		out = append(out, b)
	}
	return out, nil
}

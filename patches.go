package hopper

import (
	"context"
	"fmt"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// PatchUse says which live jobs of a kind still need a patch of its
// durable handler (worker.Patched): the ones that hold its marker, which
// replay it (keep worker.DeprecatePatch until none does), and the ones
// that hold durable records but not the marker, which may still take
// the old path (keep worker.Patched until none does).
type PatchUse struct {
	Kind, Patch string
	// Marked: live jobs of the kind that recorded the patch's marker.
	Marked int64
	// Unmarked: live jobs of the kind with durable records but without
	// the marker. An upper bound of the runs that take the old path: a
	// run that has not reached the patch yet takes the new one.
	Unmarked int64
}

// GetPatchUse reads how many live jobs of kind need the patch named
// patch, as PatchUse says. It reads the records of the kind's live jobs.
// Errors wrap ErrInvalidFilter for an empty kind or patch.
func (c *Client) GetPatchUse(ctx context.Context, kind, patch string) (PatchUse, error) {
	return c.GetPatchUseTx(ctx, c.db, kind, patch)
}

// GetPatchUseTx is GetPatchUse on the caller's transaction.
func (c *Client) GetPatchUseTx(ctx context.Context, tx jobs.DBTX, kind, patch string) (PatchUse, error) {
	if kind == "" || patch == "" {
		return PatchUse{}, fmt.Errorf("patch use: %w: want a kind and a patch name", ErrInvalidFilter)
	}
	r, err := c.queries(tx).PatchUse(ctx, db.PatchUseParams{Kind: kind, Patch: patch})
	if err != nil {
		return PatchUse{}, fmt.Errorf("patch use of %s %q: %w", kind, patch, err)
	}
	return PatchUse{Kind: kind, Patch: patch, Marked: r.Marked, Unmarked: r.Unmarked}, nil
}

// ListPatches lists every patch whose marker a live job holds, by kind
// and name, with GetPatchUse's counts. A patch it does not list is held
// by no live job: its worker.DeprecatePatch call can go.
func (c *Client) ListPatches(ctx context.Context) ([]PatchUse, error) {
	return c.ListPatchesTx(ctx, c.db)
}

// ListPatchesTx is ListPatches on the caller's transaction.
func (c *Client) ListPatchesTx(ctx context.Context, tx jobs.DBTX) ([]PatchUse, error) {
	rows, err := c.queries(tx).ListPatches(ctx)
	if err != nil {
		return nil, fmt.Errorf("list patches: %w", err)
	}
	out := make([]PatchUse, len(rows))
	for i, r := range rows {
		out[i] = PatchUse{Kind: r.Kind, Patch: r.Patch, Marked: r.Marked, Unmarked: r.Unmarked}
	}
	return out, nil
}

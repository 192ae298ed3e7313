package doccheck

import (
	"slices"
	"testing"
)

// TestGrants: the blocks that name the role, the first and those that
// mention an extra, comments dropped, the schema and the role renamed
// where a statement grants to it or revokes from it, and nothing else.
func TestGrants(t *testing.T) {
	src := "<!-- doccheck: skip names a role (app) and a schema (app_jobs) of your own -->\n```sql\n" +
		"GRANT USAGE ON SCHEMA app_jobs TO app; -- the schema\n" +
		"GRANT EXECUTE ON FUNCTION app_jobs.f,\n    app_jobs.g TO app;\n" +
		"REVOKE EXECUTE ON FUNCTION app_jobs.h FROM app; -- not app_jobs_x, nor TO apps;\n```\n\n" +
		"<!-- doccheck: skip names a role (app) -->\n```sql\nGRANT SELECT ON app_jobs.rates TO app;\n```\n\n" +
		"<!-- doccheck: skip names a role (app) -->\n```sql\nGRANT SELECT ON app_jobs.other TO app;\n```\n\n" +
		"<!-- doccheck: skip names a role (producer) -->\n```sql\nGRANT SELECT ON app_jobs.jobs TO producer;\n```\n"
	got := Grants("f.md", src, "app", `"s"`, `"s_app"`, "rates")
	want := []string{
		`GRANT USAGE ON SCHEMA "s" TO "s_app"`,
		"GRANT EXECUTE ON FUNCTION \"s\".f,\n    \"s\".g TO \"s_app\"",
		`REVOKE EXECUTE ON FUNCTION "s".h FROM "s_app"`,
		`GRANT SELECT ON "s".rates TO "s_app"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Grants:\n got %q\nwant %q", got, want)
	}
}

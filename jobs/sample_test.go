package jobs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// The sample kind that the versioning tests and fixtures follow through
// three payload versions.

// WelcomeV1 was the first payload: one name field.
type WelcomeV1 struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

// WelcomeV2 split the name.
type WelcomeV2 struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Email     string `json:"email"`
}

// Welcome (version 3) added a locale.
type Welcome struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Email     string `json:"email"`
	Locale    string `json:"locale"`
}

func welcomeV1toV2(v1 WelcomeV1) (WelcomeV2, error) {
	if v1.Name == "" {
		return WelcomeV2{}, errors.New("v1 payload without a name")
	}
	first, last, _ := strings.Cut(v1.Name, " ")
	return WelcomeV2{FirstName: first, LastName: last, Email: v1.Email}, nil
}

func welcomeV2toV3(v2 WelcomeV2) (Welcome, error) {
	return Welcome{FirstName: v2.FirstName, LastName: v2.LastName, Email: v2.Email, Locale: "en"}, nil
}

func defineWelcome(t testing.TB, name string) *jobs.Kind[Welcome] {
	t.Helper()
	k, err := jobs.Define[Welcome](name,
		jobs.Version(3),
		jobs.Upgrade(1, jobs.Convert(welcomeV1toV2)),
		jobs.Upgrade(2, jobs.Convert(welcomeV2toV3)),
	)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// longAgo as Enqueue's run_at means "now".
var longAgo = time.Unix(0, 0)

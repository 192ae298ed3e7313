package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/hopperq/hopper"
)

func schedulesCommand() *command {
	var asJSON bool
	return &command{
		name:    "schedules",
		actions: []string{"list", "pause", "resume", "trigger"},
		args:    "list [--json] | pause NAME | resume NAME | trigger NAME",
		summary: "periodic jobs: list them (next and last fire, policy; active, paused, or stale: no worker defines it); pause or resume one; fire one now",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "list: print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("schedules", args, "list", "pause", "resume", "trigger")
			switch {
			case err != nil:
				return err
			case action == "list" && len(rest) > 0:
				return fmt.Errorf("%w: list takes no argument", errUsage)
			case action != "list" && len(rest) != 1:
				return fmt.Errorf("%w: %s takes one schedule name", errUsage, action)
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			var res hopper.PauseResult
			var at time.Time
			switch action {
			case "list":
				return listSchedules(e, client, asJSON)
			case "pause":
				res, err = client.PauseSchedule(e.ctx, rest[0])
			case "resume":
				res, err = client.ResumeSchedule(e.ctx, rest[0])
			case "trigger":
				at, err = client.TriggerSchedule(e.ctx, rest[0])
			}
			if errors.Is(err, hopper.ErrUnknownSchedule) {
				return fmt.Errorf("no schedule %q (a worker that defines it creates it when it starts; hopper schedules list shows them)", rest[0])
			}
			if err != nil {
				return err
			}
			switch {
			case action == "pause" && !res.Changed:
				fmt.Fprintf(e.stdout, "schedule %s was paused already (since %s)\n", rest[0], stamp(res.PausedAt))
			case action == "pause":
				fmt.Fprintf(e.stdout, "schedule %s paused: no worker fires it until hopper schedules resume %s\n", rest[0], rest[0])
			case action == "resume" && res.Changed:
				fmt.Fprintf(e.stdout, "schedule %s resumed at its next slot (slots missed while paused do not fire)\n", rest[0])
			case action == "resume":
				fmt.Fprintf(e.stdout, "schedule %s was not paused\n", rest[0])
			default:
				if err := checkDefined(e, client, rest[0]); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "schedule %s triggered at %s: a worker that defines it enqueues the job now\n", rest[0], at.Local().Format(time.DateTime))
			}
			return nil
		},
	}
}

// checkDefined fails when no running worker defines the schedule a
// trigger was recorded for: its row outlives the workers that defined it
// (stale), and only such a worker fires it, so "enqueues the job now"
// would be untrue. The trigger is kept: it fires when one starts.
func checkDefined(e *env, client *hopper.Client, name string) error {
	list, err := client.ListSchedules(e.ctx)
	if err != nil {
		return fmt.Errorf("schedule %s triggered, but whether a worker defines it is unknown: %w", name, err)
	}
	for _, s := range list {
		if s.Name != name || !s.Stale {
			continue
		}
		last := ""
		if s.LastReported != nil {
			last = " (last reported " + stamp(*s.LastReported) + ")"
		}
		return fmt.Errorf("schedule %s triggered, but no running worker defines it%s: its job is enqueued when a worker that defines it starts", name, last)
	}
	return nil
}

func listSchedules(e *env, client *hopper.Client, asJSON bool) error {
	list, err := client.ListSchedules(e.ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(list)
	}
	return printTable(e.stdout, "schedules", "NAME\tKIND\tWHEN\tMISSED\tNEXT FIRE\tLAST FIRE\tSTATE", list, func(s hopper.ScheduleInfo) string {
		missed := s.Policy
		if s.Policy == "catch_up" {
			missed = fmt.Sprintf("catch up %d", s.CatchUp)
		}
		last := "never"
		if s.LastFireAt != nil {
			last = stamp(*s.LastFireAt)
		}
		return fmt.Sprintf("%s\t%s\t%s (%s)\t%s\t%s\t%s\t%s", s.Name, s.Kind, s.Expression, s.TimeZone, missed, stamp(s.NextFireAt), last, scheduleState(s))
	})
}

// scheduleState says whether a schedule is paused (and since when),
// stale (no running worker defines it, so nothing fires it), both, or
// neither: active. A trigger no worker has fired yet is added.
func scheduleState(s hopper.ScheduleInfo) string {
	var parts []string
	if s.PausedAt != nil {
		parts = append(parts, "paused since "+stamp(*s.PausedAt))
	}
	switch {
	case s.Stale && s.LastReported != nil:
		parts = append(parts, "stale (no worker defines it since "+stamp(*s.LastReported)+")")
	case s.Stale:
		parts = append(parts, "stale (no worker defines it)")
	}
	if len(parts) == 0 {
		parts = append(parts, "active")
	}
	if s.TriggeredAt != nil {
		parts = append(parts, "triggered")
	}
	return strings.Join(parts, ", ")
}

-- Periodic jobs. A schedule is defined in code (a kind, a cron expression,
-- a time zone, a payload function); its row here makes it durable and
-- leaderless: any worker that defines it takes the row FOR UPDATE SKIP
-- LOCKED when it is due, enqueues the job(s) and moves next_fire_at on by
-- compare-and-set, in one transaction, so a slot fires once whatever
-- crashes or restarts.
CREATE TABLE hopper_schedules (
    name            text        PRIMARY KEY,
    kind            text        NOT NULL,
    expression      text        NOT NULL,
    time_zone       text        NOT NULL,
    -- what becomes of slots missed while no worker ran: skip, once
    -- (coalesce them into one job, the default) or catch_up (up to catch_up
    -- of the most recent)
    policy          text        NOT NULL,
    catch_up        integer     NOT NULL DEFAULT 0,
    queue           text        NOT NULL,
    -- the definition in force (see hopper_schedule_versions)
    definition_hash text        NOT NULL,
    next_fire_at    timestamptz NOT NULL,
    last_fire_at    timestamptz,
    last_slot       timestamptz,
    paused_at       timestamptz,
    -- an operator asked for one fire now (hopper schedules trigger)
    triggered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT hopper_schedules_name_check CHECK (char_length(name) BETWEEN 1 AND 128),
    CONSTRAINT hopper_schedules_policy_check CHECK (policy IN ('skip', 'once', 'catch_up')),
    CONSTRAINT hopper_schedules_catch_up_check CHECK (catch_up >= 0)
);

-- Every definition of a schedule that a running worker reports, with when
-- it was first and last reported. During a rolling deploy old and new
-- workers report different definitions of one schedule: the one first seen
-- last is in force, and an old worker that restarts does not bring its
-- definition back while a newer one is reported. A definition no worker has
-- reported for stale_after_ms is stale; a schedule whose definition in force
-- is stale is kept, and reported as such.
CREATE TABLE hopper_schedule_versions (
    name           text        NOT NULL,
    hash           text        NOT NULL,
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    stale_after_ms bigint      NOT NULL,
    PRIMARY KEY (name, hash)
);

-- Workflows (migration 14): steps are jobs whose meta names their
-- workflow ("hopper.workflow") and step ("hopper.step"); the counting down
-- of a step's parents and its promotion are the triggers'
-- (hopper_jobs_workflow_advance, hopper_jobs_workflow_returned). These
-- statements add steps, show a workflow and hand it to an operator.

-- name: LinkWorkflow :one
-- Records the edges parents[i] → children[i] of waiting steps (just
-- inserted in this transaction, or already waiting), and counts each
-- child's parents still to end over all its edges stored
-- (hopper_workflow_link): every parent must be a step of the child's
-- workflow, and is locked until the commit. A step whose parents have all
-- ended is decided now; decided says how many were.
SELECT hopper_workflow_link(@parents::bigint[], @children::bigint[])::integer AS decided;

-- name: ListWorkflowSteps :many
-- A workflow's steps, in id order, wherever they are (live, dead or
-- cancelled, completed and kept in the history), up to max_steps after
-- after_id, each with its parents' ids in id order. A completed step
-- leaves the list when its history row expires.
SELECT a.id, a.queue, a.kind, a.state, coalesce(a.meta ->> 'hopper.step', '')::text AS step,
       coalesce(a.meta ->> 'hopper.workflow_policy', 'cancel')::text AS policy,
       a.attempt, a.max_attempts, a.run_at, a.created_at, a.finished_at, a.reason,
       ARRAY(SELECT d.parent_id FROM hopper_workflow_deps AS d WHERE d.child_id = a.id ORDER BY d.parent_id)::bigint[] AS parents
FROM hopper_all_jobs AS a
WHERE a.meta ? 'hopper.workflow' AND (a.meta ->> 'hopper.workflow') = @workflow::text
  AND a.id > @after_id::bigint
ORDER BY a.id
LIMIT @max_steps::integer;

-- name: LiveWorkflowSteps :many
-- The ids of a workflow's live steps (pending, scheduled, running,
-- waiting), in id order: what cancelling it whole cancels.
SELECT j.id
FROM hopper_jobs AS j
WHERE j.meta ? 'hopper.workflow' AND (j.meta ->> 'hopper.workflow') = @workflow::text
ORDER BY j.id;

-- name: RetryWorkflow :many
-- Brings every dead or cancelled step of a workflow back
-- (hopper_workflow_retry): each waits for its parents still to end, or
-- runs now when none is left. Returns their ids.
SELECT r.id::bigint AS id FROM hopper_workflow_retry(@workflow::text) AS r(id);

-- name: WorkflowParents :many
-- The parents of a step, in id order: each one's step name, where it is
-- (a live state; dead or cancelled, even once purged: the edge keeps the
-- failure; completed when kept in the history; gone: completed and no
-- longer kept, or deleted) and, when completed and kept, its handler's
-- result.
SELECT d.parent_id AS id,
       coalesce(a.meta ->> 'hopper.step', '')::text AS step,
       coalesce(a.state, d.parent_failed, 'gone')::text AS state,
       a.result
FROM hopper_workflow_deps AS d
LEFT JOIN hopper_all_jobs AS a ON a.id = d.parent_id
WHERE d.child_id = @child_id::bigint
ORDER BY d.parent_id;

-- name: WorkflowParentCounts :one
-- How a step's parents ended: completed (acked or deleted: not live, no
-- failure on the edge), dead, cancelled (the failure the edge keeps, so a
-- purged parent still counts as failed), and still live. What a batch's
-- callback reports.
SELECT count(*) FILTER (WHERE j.id IS NULL AND d.parent_failed IS NULL)::bigint AS completed,
       count(*) FILTER (WHERE j.id IS NULL AND d.parent_failed = 'dead')::bigint AS dead,
       count(*) FILTER (WHERE j.id IS NULL AND d.parent_failed = 'cancelled')::bigint AS cancelled,
       count(*) FILTER (WHERE j.id IS NOT NULL)::bigint AS live
FROM hopper_workflow_deps AS d
LEFT JOIN hopper_jobs AS j ON j.id = d.parent_id
WHERE d.child_id = @child_id::bigint;

-- name: ListLiveWorkflows :many
-- Workflows with live steps, in id order (bytewise), up to max_workflows
-- after after_id ('' for the first page): how many of their steps wait,
-- are ready (pending or scheduled) and run, and when the oldest live one
-- was enqueued. Read through hopper_jobs_workflow_idx; a workflow whose
-- steps have all ended is no longer listed (ListWorkflowSteps still
-- shows it).
SELECT (j.meta ->> 'hopper.workflow')::text AS workflow,
       count(*) FILTER (WHERE j.state = 'waiting')::bigint AS waiting,
       count(*) FILTER (WHERE j.state IN ('pending', 'scheduled'))::bigint AS ready,
       count(*) FILTER (WHERE j.state = 'running')::bigint AS running,
       min(j.created_at)::timestamptz AS oldest
FROM hopper_jobs AS j
WHERE j.meta ? 'hopper.workflow' AND (j.meta ->> 'hopper.workflow') COLLATE "C" > @after_id::text
GROUP BY 1
ORDER BY (j.meta ->> 'hopper.workflow') COLLATE "C"
LIMIT @max_workflows::integer;

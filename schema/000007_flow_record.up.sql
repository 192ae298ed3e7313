-- The flow control each queue's workers run with, as the last worker to
-- start recorded it: every worker of a queue must be given the same
-- FlowControl (one without it claims by the plain rules, and the limits no
-- longer hold), so a worker that starts with another one says so in its
-- log. flow_control is the worker's description of it ('' for none; NULL:
-- never recorded), flow_control_by the worker's id, flow_control_at when.
ALTER TABLE hopper_queues
    ADD COLUMN flow_control    text,
    ADD COLUMN flow_control_by text,
    ADD COLUMN flow_control_at timestamptz;

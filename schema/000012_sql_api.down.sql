DROP FUNCTION IF EXISTS hopper_enqueue_many(jsonb);
DROP FUNCTION IF EXISTS hopper_enqueue(text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text);
DROP FUNCTION IF EXISTS hopper_enqueue_values(text, text, text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text);
DROP FUNCTION IF EXISTS hopper_go_duration(interval);
DROP FUNCTION IF EXISTS hopper_go_escapes(text);

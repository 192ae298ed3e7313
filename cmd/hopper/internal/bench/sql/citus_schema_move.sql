-- Moves a distributed schema ($1) to the node on 127.0.0.1:$2. The scratch
-- schema is empty when it moves, so blocking its writes costs nothing.
SELECT citus_schema_move($1::regnamespace, '127.0.0.1', $2, 'block_writes');

"""Enqueue Hopper jobs from Python with psycopg 3 (Debian: python3-psycopg)."""
import json
import os

import psycopg
from psycopg.types.json import Jsonb

with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
    # One job, with named parameters; the others take Hopper's defaults.
    welcome = """SELECT id, inserted FROM hopper_enqueue(kind => %s, payload => %s, priority => %s,
                                                       unique_key => %s, meta => %s)"""
    args = ("email", Jsonb({"to": "ada@example.com"}), 3, "welcome-ada", Jsonb({"source": "python"}))
    for _ in range(2):  # the second time, nothing is inserted: the holder's id comes back
        job_id, inserted = conn.execute(welcome, args).fetchone()
        print(json.dumps({"id": job_id, "inserted": inserted}))

    # A batch: one statement, one row per job, in order.
    jobs = [
        {"kind": "email", "payload": {"to": "bob@example.com"}, "meta": {"source": "python"}},
        {"kind": "email", "payload": {"to": "eve@example.com"}, "meta": {"source": "python"}, "max_attempts": 3},
    ]
    for job_id, inserted in conn.execute("SELECT id, inserted FROM hopper_enqueue_many(%s)", (Jsonb(jobs),)):
        print(json.dumps({"id": job_id, "inserted": inserted}))

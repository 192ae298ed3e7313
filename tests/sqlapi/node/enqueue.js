// Enqueue Hopper jobs from Node with the pg package (npm install pg).
const { Client } = require("pg");

async function main() {
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    // One job, with named parameters; the others take Hopper's defaults.
    const welcome = "SELECT id, inserted FROM hopper_enqueue(kind => $1, payload => $2, priority => $3, unique_key => $4, meta => $5)";
    const args = ["email", { to: "ada@example.com" }, 3, "welcome-ada", { source: "node" }];
    for (const row of (await client.query(welcome, args)).rows) console.log(JSON.stringify(row));
    // The same unique key again: nothing inserted, the holder's id back.
    for (const row of (await client.query(welcome, args)).rows) console.log(JSON.stringify(row));

    // A batch: one statement, one row per job, in order.
    const jobs = [
      { kind: "email", payload: { to: "bob@example.com" }, meta: { source: "node" } },
      { kind: "email", payload: { to: "eve@example.com" }, meta: { source: "node" }, max_attempts: 3 },
    ];
    const batch = await client.query("SELECT id, inserted FROM hopper_enqueue_many($1)", [JSON.stringify(jobs)]);
    for (const row of batch.rows) console.log(JSON.stringify(row));
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(`${err.message}${err.hint ? ` (hint: ${err.hint})` : ""}`);
  process.exit(1);
});

// A node-q subscriber for the kdb+ IPC tests (tests/test_ipc_clients.py):
// subscribes with .u.sub and prints every row its `upd` events carry, one
// JSON line each, until it has ROWS rows or TIMEOUT_S passes.
//
//   node node_sub.js PORT TABLE SYMS ROWS TIMEOUT_S
//   (SYMS: comma-separated, or "`" for every symbol)

"use strict";
const nodeq = require("node-q");
const [port, table, syms, rows, timeoutS] = process.argv.slice(2);
const want = parseInt(rows, 10);
let got = 0;

// flipTables false: a table arrives as {column: [values]}, so an empty one
// still names its columns.
nodeq.connect({ host: "127.0.0.1", port: parseInt(port, 10), user: "tickdb", password: "tickdb",
                flipTables: false }, (err, con) => {
    if (err) {
        console.log(JSON.stringify({ error: String(err) }));
        process.exit(2);
    }
    con.on("upd", (t, data) => {
        for (let i = 0; i < data.sym.length; i++) {
            got += 1;
            console.log(JSON.stringify({ table: t, sym: data.sym[i], price: data.price[i], size: data.size[i] }));
        }
        if (got >= want) {
            con.close(() => process.exit(0));
        }
    });
    const symArg = syms === "`" ? nodeq.symbol("") : nodeq.symbols(syms.split(","));
    con.k(".u.sub", nodeq.symbol(table), symArg, (err2, answer) => {
        if (err2) {
            console.log(JSON.stringify({ error: String(err2) }));
            process.exit(3);
        }
        // The answer: (table name; empty table).
        console.log(JSON.stringify({ subscribed: answer[0], columns: Object.keys(answer[1] || {}) }));
    });
});
setTimeout(() => {
    console.log(JSON.stringify({ timeout: true, got }));
    process.exit(4);
}, parseFloat(timeoutS) * 1000);

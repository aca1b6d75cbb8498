// src/lsp_ext.ts against the real server: every command the extension runs is one that
// `tandem lsp` advertises, and the custom requests answer with the fields it reads. Needs
// TANDEM_BIN (scripts/test-vscode sets it); serves `--standalone` in a temporary TANDEM_HOME.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, test } from "node:test";

import { StreamMessageReader, StreamMessageWriter, createMessageConnection } from "vscode-jsonrpc/node";

import { Cmd, DOCUMENT, STATUS } from "../../src/lsp_ext.ts";

const bin = process.env.TANDEM_BIN;
const home = mkdtempSync(path.join(os.tmpdir(), "tandem-protocol-"));
after(() => rmSync(home, { recursive: true, force: true }));

test("the commands and requests of lsp_ext.ts are the server's", { skip: !bin && "TANDEM_BIN is not set" }, async () => {
    const child = spawn(bin!, ["lsp", "--standalone", "--workspace", home], {
        env: { PATH: process.env.PATH, HOME: home, TANDEM_HOME: path.join(home, "data"), TANDEM_EMBEDDING_MODEL: "off" },
        stdio: ["pipe", "pipe", "inherit"],
    });
    const conn = createMessageConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
    conn.listen();
    try {
        const init = (await conn.sendRequest("initialize", {
            processId: process.pid,
            rootUri: null,
            capabilities: {},
            workspaceFolders: [{ uri: `file://${home}`, name: "ws" }],
        })) as { capabilities: { executeCommandProvider: { commands: string[] } } };
        const advertised = init.capabilities.executeCommandProvider.commands;
        for (const command of Object.values(Cmd)) assert.ok(advertised.includes(command), `the server does not advertise ${command}`);
        await conn.sendNotification("initialized", {});

        const status = (await conn.sendRequest(STATUS, {})) as Record<string, unknown>;
        for (const field of ["version", "pid", "home", "log_file", "workspace", "daemon", "focus_task"]) assert.ok(field in status, `tandem/status has no ${field}`);
        assert.equal(status.daemon, false);

        await assert.rejects(conn.sendRequest(DOCUMENT, { uri: "tandem://task/01NOSUCHTASK000000000000000" }), (e: { data?: { error?: { code?: string } } }) => {
            assert.equal(e.data?.error?.code, "TASK_NOT_FOUND");
            return true;
        });
        const listed = await conn.sendRequest("workspace/executeCommand", { command: Cmd.tasksList, arguments: [] });
        assert.deepEqual(listed, []);

        await conn.sendRequest("shutdown");
        await conn.sendNotification("exit");
    } finally {
        conn.dispose();
        child.kill();
    }
});

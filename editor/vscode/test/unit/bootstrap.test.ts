// The bootstrap (src/bootstrap.ts) against real executables in a temporary folder, and the
// real `tandem` when TANDEM_BIN names it.

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, test } from "node:test";

import { BootstrapError, bootstrap, checkBinary, findBinary } from "../../src/bootstrap.ts";
import { MIN_VERSION } from "../../src/format.ts";

const dir = mkdtempSync(path.join(os.tmpdir(), "tandem-bootstrap-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/// An executable `name` in `sub` that prints `output` for --version (exit `code`).
function fake(sub: string, name: string, output: string, code = 0): string {
    const d = path.join(dir, sub);
    mkdirSync(d, { recursive: true });
    const p = path.join(d, name);
    writeFileSync(p, `#!/bin/sh\necho '${output}'\nexit ${code}\n`);
    chmodSync(p, 0o755);
    return p;
}

const good = fake("good", "tandem", `tandem ${MIN_VERSION}`);
const old = fake("old", "tandem", "tandem 0.0.1");
const broken = fake("broken", "tandem", "oops", 3);
const other = fake("other", "tandem", "something 1.0.0");
writeFileSync(path.join(dir, "plain"), "not executable");
mkdirSync(path.join(dir, "notexec"), { recursive: true });
writeFileSync(path.join(dir, "notexec", "tandem"), "#!/bin/sh\n");

test("the setting wins over PATH, PATH is searched in order, non-executables are skipped", () => {
    const PATH = [path.join(dir, "notexec"), path.join(dir, "good"), path.join(dir, "old")].join(path.delimiter);
    assert.equal(findBinary(null, PATH, undefined), good);
    assert.equal(findBinary("", PATH, undefined), good);
    assert.equal(findBinary(old, PATH, undefined), old);
    assert.equal(findBinary("old/tandem", PATH, dir), old);
    assert.equal(findBinary(null, path.join(dir, "notexec"), undefined), null);
    assert.equal(findBinary(null, undefined, undefined), null);
    assert.equal(findBinary("~/x/tandem", PATH, undefined), path.join(os.homedir(), "x/tandem"));
});

test("--version is checked: too old, broken and foreign binaries say what to do", async () => {
    assert.deepEqual(await checkBinary(good), { path: good, version: MIN_VERSION });
    const cases: [string, BootstrapError["kind"], RegExp][] = [
        [old, "too-old", /tandem 0\.0\.1; this extension needs .* or newer/],
        [broken, "broken", /--version` failed/],
        [other, "broken", /not a tandem version/],
        [path.join(dir, "plain"), "missing", /not executable/],
        [path.join(dir, "nowhere"), "missing", /does not exist/],
    ];
    for (const [bin, kind, message] of cases) {
        await assert.rejects(checkBinary(bin), (e: unknown) => e instanceof BootstrapError && e.kind === kind && message.test(e.message), bin);
    }
});

test("a missing binary names the setting and PATH", async () => {
    await assert.rejects(bootstrap(null, path.join(dir, "notexec"), undefined), /tandem\.path is not set and there is no tandem on PATH/);
    await assert.rejects(bootstrap("tandem-nope", "", undefined), /tandem\.path is "tandem-nope", which is not on PATH/);
});

test("the carried binary is used unless tandem.path is set or PATH has a newer one", async () => {
    const carried = fake("carried", "tandem", "tandem 5.0.0");
    const newer = fake("newer", "tandem", "tandem 5.1.0");
    const same = fake("same", "tandem", "tandem 5.0.0");
    const at = (...subs: string[]) => subs.map((s) => path.join(dir, s)).join(path.delimiter);
    assert.equal((await bootstrap(null, at("notexec"), undefined, carried)).path, carried);
    assert.equal((await bootstrap(null, at("same"), undefined, carried)).path, carried);
    assert.equal((await bootstrap(null, at("old"), undefined, carried)).path, carried);
    assert.equal((await bootstrap(null, at("broken"), undefined, carried)).path, carried);
    assert.equal((await bootstrap(null, at("newer"), undefined, carried)).path, newer);
    assert.equal((await bootstrap(good, at("newer"), undefined, carried)).path, good);
    // A package without one (the generic .vsix): PATH, as before.
    assert.equal((await bootstrap(null, at("same"), undefined, path.join(dir, "nowhere", "tandem"))).path, same);
});

test("the real tandem passes the bootstrap", { skip: !process.env.TANDEM_BIN && "TANDEM_BIN is not set" }, async () => {
    const server = await bootstrap(process.env.TANDEM_BIN!, undefined, undefined);
    assert.match(server.version, /^\d+\.\d+\.\d+$/);
});

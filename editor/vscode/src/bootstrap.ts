// Finding the `tandem` binary and checking it, as rust-analyzer's bootstrap does: the
// `tandem.path` setting; else the binary a platform-specific .vsix carries (`server/tandem`),
// unless `tandem` on PATH is newer; else `tandem` on PATH. Then `tandem --version` against
// `MIN_VERSION`. No VS Code here: `ctx.ts` turns a failure into a message with what to do.

import { execFile } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

import { MIN_VERSION, compareVersions, parseVersion } from "./format.ts";

/// A binary found and checked.
export interface Server {
    path: string;
    version: string;
}

/// Why no binary can be used; `message` says what to do.
export class BootstrapError extends Error {
    readonly kind: "missing" | "too-old" | "broken";
    constructor(kind: "missing" | "too-old" | "broken", message: string) {
        super(message);
        this.kind = kind;
    }
}

/// Where the binary is: the setting (`~` expanded, relative to the workspace folder), else the
/// first executable `tandem` on `envPath`; null when there is none.
export function findBinary(setting: string | null, envPath: string | undefined, folder: string | undefined): string | null {
    if (setting && setting.trim()) {
        let p = setting.trim();
        if (p === "~" || p.startsWith("~/")) p = path.join(os.homedir(), p.slice(1));
        if (!path.isAbsolute(p) && p.includes(path.sep)) p = path.resolve(folder ?? process.cwd(), p);
        if (path.isAbsolute(p)) return p;
        return onPath(p, envPath);
    }
    return onPath("tandem", envPath);
}

function onPath(name: string, envPath: string | undefined): string | null {
    for (const dir of (envPath ?? "").split(path.delimiter)) {
        if (!dir) continue;
        const candidate = path.join(dir, name);
        if (isExecutable(candidate)) return candidate;
    }
    return null;
}

function isExecutable(p: string): boolean {
    try {
        accessSync(p, constants.X_OK);
        return statSync(p).isFile();
    } catch {
        return false;
    }
}

/// Runs `bin --version` and checks it against `MIN_VERSION`.
export async function checkBinary(bin: string): Promise<Server> {
    if (!isExecutable(bin)) {
        throw new BootstrapError("missing", `${bin} does not exist or is not executable.`);
    }
    const output = await new Promise<string>((resolve, reject) => {
        execFile(bin, ["--version"], { timeout: 10_000 }, (err, stdout, stderr) => {
            if (err) reject(new BootstrapError("broken", `\`${bin} --version\` failed: ${stderr.trim() || err.message}`));
            else resolve(stdout);
        });
    });
    const version = parseVersion(output);
    if (!version) {
        throw new BootstrapError("broken", `\`${bin} --version\` said "${output.trim()}", not a tandem version.`);
    }
    if (compareVersions(version, MIN_VERSION) < 0) {
        throw new BootstrapError(
            "too-old",
            `${bin} is tandem ${version}; this extension needs ${MIN_VERSION} or newer. Update it (cargo install --path . in Tandem's repository) or point tandem.path at a newer one.`,
        );
    }
    return { path: bin, version };
}

/// The binary this extension carries, when it is a platform-specific package: `bundled`
/// (`<extension>/server/tandem`) if it is there.
export function bundledBinary(bundled: string | undefined): string | null {
    return bundled && isExecutable(bundled) ? bundled : null;
}

/// Finds and checks the binary; the error says where it looked. `bundled` is where a
/// platform-specific package carries one: used unless `tandem.path` is set or `tandem` on
/// PATH is a newer version.
export async function bootstrap(setting: string | null, envPath: string | undefined, folder: string | undefined, bundled?: string): Promise<Server> {
    const carried = setting && setting.trim() ? null : bundledBinary(bundled);
    if (carried) {
        const mine = await checkBinary(carried);
        const other = onPath("tandem", envPath);
        if (!other) return mine;
        try {
            const theirs = await checkBinary(other);
            return compareVersions(theirs.version, mine.version) > 0 ? theirs : mine;
        } catch {
            return mine;
        }
    }
    const bin = findBinary(setting, envPath, folder);
    if (!bin) {
        const where = setting && setting.trim() ? `tandem.path is "${setting}", which is not on PATH` : "tandem.path is not set and there is no tandem on PATH";
        throw new BootstrapError(
            "missing",
            `The tandem binary was not found (${where}). Install it (cargo install --path . in Tandem's repository) or set tandem.path to the binary.`,
        );
    }
    return checkBinary(bin);
}

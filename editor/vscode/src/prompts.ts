// The hub's prompts in the palette: a QuickPick of `/server:prompt` commands, then one input
// per argument whose values complete through the server (`tandem.prompt.complete`, which asks
// the downstream server's `completion/complete`), then the messages in a new editor, with an
// offer to copy them.

import * as vscode from "vscode";

import type { Ctx } from "./ctx.ts";
import { debounce, errorText, messagesMarkdown, messagesText } from "./format.ts";
import { Cmd, type Completion, type ParsedCommand, type PromptInfo, type PromptMessages } from "./lsp_ext.ts";

/// Asks for a prompt and its arguments, runs it and shows the messages.
export async function runPrompt(ctx: Ctx): Promise<void> {
    const prompts = await ctx.exec<PromptInfo[]>(Cmd.promptsList);
    if (!prompts.length) {
        void vscode.window.showInformationMessage("Tandem: no downstream server offers prompts (Tandem: Servers shows them).");
        return;
    }
    const picked = await vscode.window.showQuickPick(
        prompts.map((p) => ({
            label: p.command,
            description: p.title ?? undefined,
            detail: [p.description, p.arguments.map((a) => (a.required ? `${a.name}*` : a.name)).join(" ")].filter(Boolean).join(" · "),
            prompt: p,
        })),
        { title: "Tandem: Run Prompt", placeHolder: "A prompt of the workspace's servers", matchOnDescription: true, matchOnDetail: true },
    );
    if (!picked) return;
    const p = picked.prompt;
    const values: Record<string, string> = {};
    for (const [i, arg] of p.arguments.entries()) {
        const value = await askArgument(ctx, p, values, arg, `${i + 1}/${p.arguments.length}`);
        if (value === undefined) return;
        if (value !== "") values[arg.name] = value;
    }
    const result = await ctx.exec<PromptMessages>(Cmd.promptRun, { server: p.server, prompt: p.name, arguments: values });
    await showMessages(result);
}

/// Shows a prompt's messages in a new Markdown editor and offers to copy them.
export async function showMessages(result: PromptMessages): Promise<void> {
    const doc = await vscode.workspace.openTextDocument({ language: "markdown", content: messagesMarkdown(result) });
    await vscode.window.showTextDocument(doc, { preview: false });
    const copy = await vscode.window.showInformationMessage(
        `Tandem: /${result.server}:${result.prompt} gave ${result.messages.length} message${result.messages.length === 1 ? "" : "s"}.`,
        "Copy",
    );
    if (copy) await vscode.env.clipboard.writeText(messagesText(result));
}

type Arg = PromptInfo["arguments"][number];
type ValueItem = vscode.QuickPickItem & { value: string };

/// One argument's value: what is typed, or a completion the server offers for it. Undefined
/// when the user cancels; "" for an optional argument left empty.
async function askArgument(ctx: Ctx, p: PromptInfo, values: Record<string, string>, arg: Arg, step: string): Promise<string | undefined> {
    // The line so far, quoted by the server's own grammar: completion sees the other arguments.
    const parsed = await ctx.exec<ParsedCommand>(Cmd.promptParse, {
        line: p.command,
        append: Object.entries(values).map(([name, value]) => ({ name, value })),
    });
    const qp = vscode.window.createQuickPick<ValueItem>();
    qp.title = `${p.command} · ${arg.name}${arg.required ? " (required)" : " (optional)"} · ${step}`;
    qp.placeholder = arg.description ?? `a value for ${arg.name}`;
    qp.ignoreFocusOut = true;
    let generation = 0;
    const complete = async () => {
        const typed = qp.value;
        const mine = ++generation;
        const typedItem: ValueItem[] = typed
            ? [{ label: typed, description: "as typed", value: typed, alwaysShow: true }]
            : arg.required
              ? []
              : [{ label: "(leave empty)", description: `${arg.name} is optional`, value: "", alwaysShow: true }];
        qp.items = typedItem;
        qp.busy = true;
        try {
            const line = `${parsed.line} ${arg.name}=${typed}`;
            const offered = await ctx.exec<Completion[]>(Cmd.promptComplete, { line, cursor: Buffer.byteLength(line) });
            if (mine !== generation) return;
            const more = offered
                .filter((c) => c.kind === "value" && c.label !== typed)
                .map((c) => ({ label: c.label, description: c.detail ?? "completion", value: c.label, alwaysShow: true }));
            qp.items = [...typedItem, ...more];
        } catch (e) {
            ctx.log.warn(`completing ${arg.name}: ${errorText(e)}`);
        } finally {
            if (mine === generation) qp.busy = false;
        }
    };
    const later = debounce(80, () => void complete());
    return new Promise<string | undefined>((resolve) => {
        let done = false;
        const finish = (v: string | undefined) => {
            if (done) return;
            done = true;
            later.cancel();
            resolve(v);
            qp.dispose();
        };
        qp.onDidChangeValue(() => later());
        qp.onDidAccept(() => {
            const value = qp.selectedItems[0]?.value ?? qp.activeItems[0]?.value ?? qp.value;
            if (value === "" && arg.required) {
                qp.title = `${p.command} · ${arg.name} is required · ${step}`;
                return;
            }
            finish(value);
        });
        qp.onDidHide(() => finish(undefined));
        qp.show();
        void complete();
    });
}

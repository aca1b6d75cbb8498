// A downstream server's question for the user (`tandem/question`): a quick pick to answer or
// decline, then one input box or quick pick per field, answered with `tandem.answer`. Escape
// at any step cancels. The text comes from the server: shown on one line, cut, never as
// Markdown or a link.

import * as vscode from "vscode";

import type { Ctx } from "./ctx.ts";
import { errorText } from "./format.ts";
import { Cmd, QUESTION, type Question, type QuestionField } from "./lsp_ext.ts";

const MAX_TEXT = 300;

function oneLine(text: unknown): string {
    const s = (typeof text === "string" ? text : "").replace(/[\p{Cc}]/gu, " ");
    return s.length > MAX_TEXT ? `${s.slice(0, MAX_TEXT)}…` : s;
}

interface Choice extends vscode.QuickPickItem {
    value: unknown;
}

function choicesOf(field: QuestionField): Choice[] | undefined {
    if (field.type === "boolean") return [{ label: "yes", value: true }, { label: "no", value: false }];
    if (Array.isArray(field.enum)) return field.enum.map((v, i) => ({ label: oneLine(field.enumNames?.[i] ?? String(v)), value: v }));
    const of = field.oneOf ?? field.anyOf;
    if (Array.isArray(of)) {
        const list = of.filter((o) => o.const !== undefined).map((o) => ({ label: oneLine(o.title ?? String(o.const)), value: o.const }));
        return list.length > 0 ? list : undefined;
    }
    return undefined;
}

const LEAVE_EMPTY = Symbol("leave empty");

/// The form of `q` filled in, or undefined when the user cancels.
async function askFields(q: Question): Promise<Record<string, unknown> | undefined> {
    const props = q.schema?.properties ?? {};
    const required = new Set(q.schema?.required ?? []);
    const content: Record<string, unknown> = {};
    for (const name of Object.keys(props).sort()) {
        const field = props[name] ?? {};
        const title = `${oneLine(field.title ?? name)}${required.has(name) ? " *" : ""}`;
        const detail = field.description ? oneLine(field.description) : undefined;
        const many = field.type === "array" && field.items ? choicesOf(field.items) : undefined;
        if (many) {
            const defaults = Array.isArray(field.default) ? field.default : [];
            for (const c of many) c.picked = defaults.includes(c.value);
            const picks = await vscode.window.showQuickPick(many, { title, placeHolder: detail, canPickMany: true, ignoreFocusOut: true });
            if (!picks) return undefined;
            if (picks.length > 0) content[name] = picks.map((p) => p.value);
            continue;
        }
        const choices = choicesOf(field);
        if (choices) {
            const items: Choice[] = required.has(name) ? choices : [{ label: "(leave empty)", value: LEAVE_EMPTY }, ...choices];
            const pick = await vscode.window.showQuickPick(items, { title, placeHolder: detail, ignoreFocusOut: true });
            if (!pick) return undefined;
            if (pick.value !== LEAVE_EMPTY) content[name] = pick.value;
            continue;
        }
        const numeric = field.type === "number" || field.type === "integer";
        const text = await vscode.window.showInputBox({
            title,
            prompt: detail,
            value: field.default !== undefined ? String(field.default) : "",
            ignoreFocusOut: true,
            validateInput: (v) => {
                if (v === "" && !required.has(name)) return undefined;
                if (v === "" && required.has(name)) return "Required";
                if (!numeric) return undefined;
                const n = Number(v);
                if (Number.isNaN(n)) return `A ${field.type}`;
                if (field.type === "integer" && !Number.isInteger(n)) return "An integer";
                return undefined;
            },
        });
        if (text === undefined) return undefined;
        if (text === "" && !required.has(name)) continue;
        content[name] = numeric ? Number(text) : text;
    }
    return content;
}

async function show(ctx: Ctx, q: Question): Promise<void> {
    const prompt = `Server '${oneLine(q.server)}' asks: ${oneLine(q.message)}`;
    for (;;) {
        const choice = await vscode.window.showQuickPick(["Answer", "Decline"], { title: prompt, ignoreFocusOut: true });
        let action: "accept" | "decline" | "cancel" = "cancel";
        let content: Record<string, unknown> | undefined;
        if (choice === "Answer") {
            content = await askFields(q);
            action = content ? "accept" : "cancel";
        } else if (choice === "Decline") {
            action = "decline";
        }
        try {
            await ctx.exec(Cmd.answer, { id: q.id, action, content });
            return;
        } catch (e) {
            const why = errorText(e);
            void vscode.window.showWarningMessage(`Tandem: ${why}`);
            // A form the server side refused is asked again; a question gone is not.
            if (action !== "accept" || why.includes("no question")) return;
        }
    }
}

export function registerQuestions(ctx: Ctx): void {
    ctx.onNotification<Question>(QUESTION, (q) => void show(ctx, q));
}

//! Memory in the editor: hover on an `[ID]` citation shows the entry, `workspace/symbol`
//! searches the entries (the newest with no query), each located at its `tandem://memory/ID`
//! document.

use tower_lsp_server::ls_types::{
    Hover, HoverContents, HoverParams, Location, MarkupContent, MarkupKind, OneOf, Range,
    SymbolKind, Uri, WorkspaceSymbol,
};

use super::TandemLsp;
use super::session::{LspResult, call_error};
use super::text;
use tandem_core::calls::{
    self,
    params::{RecentParams, SearchParams, ShowParams},
};
use tandem_core::memory::EntryDetails;

/// An entry's document: `tandem://memory/ID`.
pub(super) const MEMORY_URI: &str = "tandem://memory/";
/// How many entries `workspace/symbol` lists.
const SYMBOL_LIMIT: i64 = 20;
/// A hover's Markdown is cut past this many bytes.
const HOVER_MAX: usize = 1500;

impl TandemLsp {
    /// The entry an `[ID]` citation under the cursor names. An unknown id shows nothing; an
    /// ambiguous one says so.
    pub(super) async fn citation_hover(&self, params: HoverParams) -> LspResult<Option<Hover>> {
        let at = params.text_document_position_params;
        let Some(text) = self.session.text_of(&at.text_document.uri) else {
            return Ok(None);
        };
        let Some((id, range)) =
            text::citation_at(&text, at.position, self.session.flags().encoding)
        else {
            return Ok(None);
        };
        let shown = self
            .session
            .run(&calls::MEMORY_SHOW, ShowParams { id })
            .await;
        let markdown = match shown {
            Ok(entry) => hover_markdown(&entry),
            Err(e) if e.code() == "ENTRY_NOT_FOUND" => return Ok(None),
            Err(e) if e.code() == "AMBIGUOUS_ID" => format!("**{}**\n\n{}", e.code(), e.message()),
            Err(e) => return Err(call_error(e)),
        };
        Ok(Some(Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: markdown,
            }),
            range: Some(range),
        }))
    }

    /// Entries matching `query` as symbols; the newest when it is empty.
    pub(super) async fn memory_symbols(&self, query: String) -> LspResult<Vec<WorkspaceSymbol>> {
        if query.trim().is_empty() {
            let recent = RecentParams {
                limit: Some(SYMBOL_LIMIT),
            };
            let entries = self
                .session
                .run(&calls::MEMORY_RECENT, recent)
                .await
                .map_err(call_error)?;
            return Ok(entries
                .iter()
                .filter_map(|e| {
                    memory_symbol(&e.id.to_string(), &e.title, e.entry_type.as_str(), &e.tags)
                })
                .collect());
        }
        let search = SearchParams {
            query,
            context: None,
            limit: Some(SYMBOL_LIMIT),
            entry_type: None,
            project: None,
        };
        let found = self
            .session
            .run(&calls::MEMORY_SEARCH, search)
            .await
            .map_err(call_error)?;
        Ok(found
            .results
            .iter()
            .filter_map(|r| memory_symbol(&r.id, &r.title, &r.entry_type, &r.tags))
            .collect())
    }
}

fn symbol_kind(entry_type: &str) -> SymbolKind {
    match entry_type {
        "bug" => SymbolKind::EVENT,
        "pattern" => SymbolKind::CLASS,
        "decision" => SymbolKind::CONSTANT,
        "pitfall" => SymbolKind::KEY,
        "config" => SymbolKind::PROPERTY,
        _ => SymbolKind::FILE,
    }
}

fn memory_symbol(
    id: &str,
    title: &str,
    entry_type: &str,
    tags: &[String],
) -> Option<WorkspaceSymbol> {
    let uri: Uri = format!("{MEMORY_URI}{id}").parse().ok()?;
    let container = if tags.is_empty() {
        entry_type.to_string()
    } else {
        format!("{entry_type} · {}", tags.join(", "))
    };
    Some(WorkspaceSymbol {
        name: title.to_string(),
        kind: symbol_kind(entry_type),
        tags: None,
        container_name: Some(container),
        location: OneOf::Left(Location::new(uri, Range::default())),
        data: None,
    })
}

fn hover_markdown(entry: &EntryDetails) -> String {
    let mut md = crate::render::entry_markdown(entry);
    if md.len() > HOVER_MAX {
        let cut = (0..=HOVER_MAX)
            .rev()
            .find(|&i| md.is_char_boundary(i))
            .unwrap_or(0);
        md.truncate(cut);
        md.push_str(&format!(
            "…\n\n(open `{MEMORY_URI}{}` for the whole entry)",
            entry.id
        ));
    }
    md
}

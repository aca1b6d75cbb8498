//! Suggestions reviewed: the pending lists (`rekall_suggest_links`,
//! `rekall_suggest_generalize`, `rekall_suggest_entries`), accepting and rejecting one, and
//! the generalisation an accepted one's command runs (`tandem memory generalize`).
//! `suggestions.rs` makes links and generalisations on add, `proposals.rs` entry
//! suggestions.

use std::collections::HashMap;

use ulid::Ulid;

use super::records::{MAX_TITLE_CHARS, normalize_id_input};
use super::{
    AcceptOutcome, Entry, EntryRef, EntrySuggestionView, EntrySuggestions, EntryType,
    GeneralizeOutcome, GeneralizeSuggestionView, GeneralizeSuggestions, LinkCreated,
    LinkSuggestionView, LinkSuggestions, Memory, MemoryError, MemoryType, NewEntry, ProposedEntry,
    RejectOutcome, RelationType, Result, Suggestion, SuggestionKind, SuggestionStatus, check_range,
    now, round2, squash, suggestions, validate,
};
use crate::store::{IdLookup, lookup_id};

/// Suggestion list `limit` bounds and default (spec 003).
pub const SUGGESTION_LIMIT: (i64, i64, i64) = (1, 50, 10);
/// A generalisation's default content quotes this many characters of each source.
const SOURCE_LEAD_CHARS: usize = 300;
/// A tag goes on a generalisation when at least this many of its sources carry it.
const SHARED_TAG_MIN: usize = 2;
/// A generalisation's confidence when its sources give none (the add's default).
const DEFAULT_CONFIDENCE: i64 = 3;

impl Memory {
    /// The `limit` best pending suggestions of `kind` (best first), each seen through
    /// `view`, and how many are pending in all.
    fn pending<V>(
        &self,
        kind: SuggestionKind,
        limit: Option<i64>,
        view: impl Fn(Suggestion) -> Result<V>,
    ) -> Result<(Vec<V>, u64)> {
        let limit = check_range("limit", limit, SUGGESTION_LIMIT)? as usize;
        let (page, total) = suggestions::pending_page(self, kind, limit)?;
        let views = page.into_iter().map(view).collect::<Result<_>>()?;
        Ok((views, total))
    }

    /// Pending link suggestions, best first (`rekall_suggest_links`).
    pub fn link_suggestions(&self, limit: Option<i64>) -> Result<LinkSuggestions> {
        let (suggestions, total_pending) = self.pending(SuggestionKind::Link, limit, |s| {
            Ok(LinkSuggestionView {
                id: s.id.to_string(),
                entry_a: self.entry_ref(&s.entries[0])?,
                entry_b: self.entry_ref(&s.entries[1])?,
                score: round2(s.score),
                reason: suggestions::reason(self, &s)?,
                created_at: s.created_at.to_string(),
            })
        })?;
        Ok(LinkSuggestions {
            suggestions,
            total_pending,
        })
    }

    /// Pending generalisation suggestions, best first (`rekall_suggest_generalize`).
    pub fn generalize_suggestions(&self, limit: Option<i64>) -> Result<GeneralizeSuggestions> {
        let (suggestions, total_pending) =
            self.pending(SuggestionKind::Generalize, limit, |s| {
                Ok(GeneralizeSuggestionView {
                    id: s.id.to_string(),
                    entries: s
                        .entries
                        .iter()
                        .map(|id| self.entry_ref(id))
                        .collect::<Result<_>>()?,
                    score: round2(s.score),
                    reason: suggestions::reason(self, &s)?,
                    created_at: s.created_at.to_string(),
                })
            })?;
        Ok(GeneralizeSuggestions {
            suggestions,
            total_pending,
        })
    }

    /// Pending entry suggestions (learned from completed tasks), most novel first
    /// (`rekall_suggest_entries`).
    pub fn entry_suggestions(&self, limit: Option<i64>) -> Result<EntrySuggestions> {
        let (suggestions, total_pending) = self.pending(SuggestionKind::Entry, limit, |s| {
            let p = proposal_of(&s)?;
            Ok(EntrySuggestionView {
                id: s.id.to_string(),
                entry: ProposedEntry {
                    entry_type: p.entry_type.to_string(),
                    title: p.title.clone(),
                    content: p.content.clone(),
                    tags: p.tags.clone(),
                    context: p.context.clone(),
                    project: p.project.clone(),
                    confidence: p.confidence,
                },
                score: round2(s.score),
                reason: s.reason,
                created_at: s.created_at.to_string(),
            })
        })?;
        Ok(EntrySuggestions {
            suggestions,
            total_pending,
        })
    }

    fn suggestion(&self, id: &str) -> Result<Suggestion> {
        let wanted = normalize_id_input(id);
        let not_found = || MemoryError::SuggestionNotFound {
            id: id.trim().into(),
        };
        match lookup_id(&self.suggestions, &wanted)? {
            IdLookup::Found(record) => suggestions::decode_record(&record),
            IdLookup::Missing | IdLookup::TooShort | IdLookup::Ambiguous(_) => Err(not_found()),
        }
    }

    /// A pending suggestion, marked `status` (not yet stored). Caller holds the write lock.
    fn resolve_pending(&self, id: &str, status: SuggestionStatus) -> Result<Suggestion> {
        let mut s = self.suggestion(id)?;
        if s.status != SuggestionStatus::Pending {
            return Err(MemoryError::SuggestionAlreadyResolved {
                id: s.id.to_string(),
                status: s.status.to_string(),
            });
        }
        s.status = status;
        s.resolved_at = Some(now());
        Ok(s)
    }

    /// Writes a suggestion whose status changed, with its rows by entry. Caller holds the
    /// write lock and flushes.
    fn store_suggestion(&self, s: &Suggestion) -> Result<()> {
        suggestions::store(self, std::slice::from_ref(s))
    }

    /// Accepts a suggestion: creates its link, returns the command that generalises, or
    /// adds the entry it proposes (through the add: checked, stored, indexed, with its own
    /// similar entries and suggestions; the suggestion is marked accepted in the same write).
    pub fn accept(&self, suggestion_id: &str) -> Result<AcceptOutcome> {
        self.accept_by(suggestion_id, None)
    }

    /// [`Memory::accept`], by `author` (a user of a shared server): an entry it adds
    /// records them.
    pub fn accept_by(&self, suggestion_id: &str, author: Option<&str>) -> Result<AcceptOutcome> {
        let mut guard = self.lock_writes();
        let s = self.resolve_pending(suggestion_id, SuggestionStatus::Accepted)?;
        let outcome = match s.kind {
            SuggestionKind::Link => {
                let a = self.get(&s.entries[0])?;
                let b = self.get(&s.entries[1])?;
                let (Some(a), Some(b)) = (a, b) else {
                    return Err(MemoryError::EntryNotFound {
                        id: s
                            .entries
                            .iter()
                            .map(Ulid::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                };
                let action = match self.create_link(&a, &b, RelationType::Related) {
                    Ok(link) => {
                        format!("created link {} ({} -[related]-> {})", link.id, a.id, b.id)
                    }
                    Err(MemoryError::LinkAlreadyExists { link_id, .. }) => {
                        format!("the link already existed ({link_id}); nothing new was created")
                    }
                    Err(e) => return Err(e),
                };
                AcceptOutcome {
                    accepted: true,
                    suggestion_type: s.kind.to_string(),
                    action_taken: action,
                    link_created: Some(LinkCreated {
                        source_id: a.id.to_string(),
                        target_id: b.id.to_string(),
                    }),
                    generalize_command: None,
                    entry_created: None,
                }
            }
            SuggestionKind::Generalize => AcceptOutcome {
                accepted: true,
                suggestion_type: s.kind.to_string(),
                action_taken:
                    "Run generalize_command to create one semantic entry derived from these entries"
                        .into(),
                link_created: None,
                generalize_command: Some(generalize_command(&s.entries)),
                entry_created: None,
            },
            SuggestionKind::Entry => return self.accept_entry(&mut guard, s, author),
        };
        self.store_suggestion(&s)?;
        self.store.flush()?;
        Ok(outcome)
    }

    /// Adds the entry an entry suggestion proposes, the suggestion marked accepted in the
    /// same write. Caller holds the write lock (`cache` is what it guards).
    fn accept_entry(
        &self,
        cache: &mut super::similarity::SimilarityCache,
        s: Suggestion,
        author: Option<&str>,
    ) -> Result<AcceptOutcome> {
        let p = proposal_of(&s)?;
        let valid = validate(NewEntry {
            entry_type: Some(p.entry_type),
            title: p.title.clone(),
            content: p.content.clone(),
            tags: p.tags.clone(),
            context: p.context.clone(),
            project: p.project.clone(),
            confidence: Some(p.confidence.into()),
            memory_type: Some(MemoryType::Episodic),
            author: author.map(str::to_string),
        })?;
        let added = self.add_locked(cache, valid, &[], Some(s))?;
        Ok(AcceptOutcome {
            accepted: true,
            suggestion_type: SuggestionKind::Entry.to_string(),
            action_taken: format!(
                "created entry {} [{}] {}",
                added.id, added.entry_type, added.title
            ),
            link_created: None,
            generalize_command: None,
            entry_created: Some(added),
        })
    }

    /// Rejects a suggestion; it is remembered so it never comes back.
    pub fn reject(&self, suggestion_id: &str) -> Result<RejectOutcome> {
        let _guard = self.lock_writes();
        let s = self.resolve_pending(suggestion_id, SuggestionStatus::Rejected)?;
        self.store_suggestion(&s)?;
        self.store.flush()?;
        Ok(RejectOutcome {
            rejected: true,
            suggestion_id: s.id.to_string(),
        })
    }

    /// Creates one semantic entry from several entries and links it to each of them with
    /// `derived_from`: what a generalisation suggestion's command runs.
    pub fn generalize(
        &self,
        ids: &[String],
        title: Option<String>,
        content: Option<String>,
        entry_type: Option<EntryType>,
    ) -> Result<GeneralizeOutcome> {
        let mut sources: Vec<Entry> = Vec::new();
        for id in ids {
            let e = self.resolve(id)?;
            if !sources.iter().any(|s| s.id == e.id) {
                sources.push(e);
            }
        }
        if sources.len() < 2 {
            return Err(MemoryError::invalid_argument(
                "ids",
                "give at least two distinct entries to generalise",
            ));
        }
        let first_type = sources[0].entry_type;
        let entry_type =
            entry_type.unwrap_or(if sources.iter().all(|s| s.entry_type == first_type) {
                first_type
            } else {
                EntryType::Pattern
            });
        let title = title.unwrap_or_else(|| {
            let t = format!("Generalised: {}", sources[0].title);
            t.chars().take(MAX_TITLE_CHARS).collect()
        });
        let content = content.unwrap_or_else(|| {
            let mut c = format!("Generalised from {} entries:\n", sources.len());
            for s in &sources {
                let lead: String = s.content.chars().take(SOURCE_LEAD_CHARS).collect();
                c.push_str(&format!("- [{}] {}: {}\n", s.id, s.title, squash(&lead)));
            }
            c
        });
        let mut tag_count: HashMap<&str, usize> = HashMap::new();
        for s in &sources {
            for t in &s.tags {
                *tag_count.entry(t.as_str()).or_default() += 1;
            }
        }
        let mut tags: Vec<String> = tag_count
            .iter()
            .filter(|(_, n)| **n >= SHARED_TAG_MIN)
            .map(|(t, _)| t.to_string())
            .collect();
        tags.sort();
        let source_ids: Vec<Ulid> = sources.iter().map(|s| s.id).collect();
        let projects: Vec<&String> = sources.iter().filter_map(|s| s.project.as_ref()).collect();
        let project = projects
            .first()
            .filter(|p| projects.iter().all(|q| q == *p) && projects.len() == sources.len())
            .map(|p| p.to_string());
        let added = self.add_inner(
            NewEntry {
                entry_type: Some(entry_type),
                title,
                content,
                tags,
                context: None,
                project,
                confidence: Some(
                    sources
                        .iter()
                        .map(|s| s.confidence as i64)
                        .max()
                        .unwrap_or(DEFAULT_CONFIDENCE),
                ),
                memory_type: Some(MemoryType::Semantic),
                author: None,
            },
            &source_ids,
        )?;
        let new_entry = self.resolve(&added.id)?;
        let guard = self.lock_writes();
        let mut derived_from = Vec::new();
        for s in &sources {
            self.create_link(&new_entry, s, RelationType::DerivedFrom)?;
            derived_from.push(EntryRef {
                id: s.id.to_string(),
                title: s.title.clone(),
            });
        }
        // A pending suggestion for exactly this group is now done.
        if let Some(mut s) = suggestions::pending_generalization_of(self, &source_ids)? {
            s.status = SuggestionStatus::Accepted;
            s.resolved_at = Some(now());
            self.store_suggestion(&s)?;
        }
        self.store.flush()?;
        drop(guard);
        Ok(GeneralizeOutcome {
            entry: added,
            derived_from,
        })
    }
}

/// The entry an entry suggestion proposes.
fn proposal_of(s: &Suggestion) -> Result<&super::Proposal> {
    s.proposal
        .as_ref()
        .ok_or_else(|| MemoryError::Corrupt(format!("entry suggestion {} has no proposal", s.id)))
}

/// The command a generalisation suggestion hands back.
pub fn generalize_command(ids: &[Ulid]) -> String {
    let ids: Vec<String> = ids.iter().map(Ulid::to_string).collect();
    format!("tandem memory generalize {}", ids.join(" "))
}

//! Entry suggestions: entries proposed from outside the memory (a completed task's
//! decisions and issues, `crate::learn`), kept for review unless the memory already says
//! the same thing. Accepting one adds its entry through the ordinary add
//! (`review.rs`); rejecting it keeps it, so it never comes back.
//!
//! A proposal is not suggested when:
//! - an existing entry says the same thing: scored by the add's own similarity (by meaning
//!   once the embedding model is ready, else by words), at least [`Threshold::Duplicate`]
//!   to the proposal and, when it has an answer (a decision's choice and reasoning, an
//!   issue's resolution), at least [`Threshold::SameAnswer`] to that answer alone (the
//!   thresholds are `DUPLICATE_MIN`, `SAME_ANSWER_MIN` and their semantic twins in
//!   `mod.rs`);
//! - its key ([`Proposal::key`]: type, title and content, case and spacing aside) was
//!   suggested before, whatever became of it: the same decision logged by another task,
//!   one still pending, one rejected;
//! - it repeats another proposal of the same call.

use ulid::Ulid;

use super::records::{Entry, Proposal, SuggestionKind, SuggestionStatus};
use super::similarity::{self, Similar, Threshold, Weighed};
use super::{
    Memory, NewProposal, ProposalsOutcome, Result, SkippedProposal, SuggestedEntry, Suggestion,
    next_id, now, semantic, suggestions, validate,
};
use tandem_search::embeddings::Embedder;

impl Memory {
    /// The existing entry saying what `entry` (proposed) says, among those `similar` to it:
    /// at least as similar as [`Threshold::Duplicate`], and, when the proposal has an
    /// `answer` (a decision's choice and reasoning), saying that too ([`Threshold::SameAnswer`]
    /// between the answer alone and the entry). Without the second test, a decision to the
    /// same question with another choice would pass for the same decision: by words and by
    /// meaning, the question weighs more than the choice. Caller holds the write lock.
    fn same_as<'s>(
        &self,
        cache: &mut similarity::SimilarityCache,
        entry: &Entry,
        similar: &'s [Similar],
        answer: Option<&str>,
        embedder: Option<&Embedder>,
    ) -> Result<Option<&'s Similar>> {
        let same_subject: Vec<&Similar> = similar
            .iter()
            .filter(|s| s.counts_for(Threshold::Duplicate))
            .collect();
        let Some(answer) = answer.filter(|_| !same_subject.is_empty()) else {
            return Ok(same_subject.first().copied());
        };
        let probe = Entry {
            id: next_id(),
            title: answer.to_string(),
            content: String::new(),
            tags: Vec::new(),
            context: None,
            ..entry.clone()
        };
        let vectors = embedder.map(|e| semantic::Semantic::vectors_of(e, &probe));
        let ids: Vec<Ulid> = same_subject.iter().map(|s| s.id).collect();
        let scores = similarity::scores_against(self, cache, &probe, vectors.as_ref(), &ids)?;
        let min = Threshold::SameAnswer.min(vectors.is_some());
        Ok(same_subject
            .into_iter()
            .zip(scores)
            .find(|(_, score)| *score >= min)
            .map(|(s, _)| s))
    }

    /// Suggests each proposed entry for review, unless the memory already holds an entry
    /// saying the same thing or the same entry was suggested before. Every proposal is
    /// checked as an add would check it before anything is written.
    pub fn suggest_entries(&self, proposals: Vec<NewProposal>) -> Result<ProposalsOutcome> {
        let mut valid = Vec::with_capacity(proposals.len());
        for p in proposals {
            valid.push((validate(p.entry)?, p.source, p.answer));
        }
        let mut cache = self.lock_writes();
        let embedder = self.semantic.embedder();
        let now = now();
        let mut outcome = ProposalsOutcome::default();
        let mut new: Vec<Suggestion> = Vec::new();
        for (valid, source, answer) in valid {
            let entry = valid.entry;
            let proposal = Proposal {
                entry_type: entry.entry_type,
                title: entry.title.clone(),
                content: entry.content.clone(),
                tags: entry.tags.clone(),
                context: entry.context.clone(),
                project: entry.project.clone(),
                confidence: entry.confidence,
            };
            let key = proposal.key();
            let skip = |because: String| SkippedProposal {
                title: entry.title.clone(),
                because,
            };
            if new
                .iter()
                .any(|s| s.remembered_key().as_ref() == Some(&key))
            {
                outcome
                    .skipped
                    .push(skip("it repeats another proposal of this task".into()));
                continue;
            }
            if let Some(earlier) = self.suggestion_keys.get(&key)? {
                let status = match self.suggestions.get(&earlier)? {
                    Some(bytes) => suggestions::decode_record(&bytes)?.status,
                    None => SuggestionStatus::Pending,
                };
                outcome.skipped.push(skip(format!(
                    "it was suggested before ({} {status})",
                    String::from_utf8_lossy(&earlier)
                )));
                continue;
            }
            let vectors = embedder
                .as_ref()
                .map(|e| semantic::Semantic::vectors_of(e, &entry));
            let similar = similarity::find_similar(
                self,
                &mut cache,
                &entry,
                vectors.as_ref(),
                Weighed::Proposed,
            )?
            .similar;
            let same = self.same_as(
                &mut cache,
                &entry,
                &similar,
                answer.as_deref(),
                embedder.as_deref(),
            )?;
            if let Some(same) = same {
                outcome.skipped.push(skip(format!(
                    "the memory already has it: [{}] {} (similarity {:.2})",
                    same.id,
                    self.title_of(&same.id)?,
                    same.score
                )));
                continue;
            }
            let (score, closest) = match similar.first() {
                Some(s) => (
                    1.0 - s.score,
                    format!(
                        "the closest entry, [{}] {}, is {:.2} similar",
                        s.id,
                        self.title_of(&s.id)?,
                        s.score
                    ),
                ),
                None => (1.0, "no similar entry in the memory".to_string()),
            };
            let s = Suggestion {
                id: next_id(),
                kind: SuggestionKind::Entry,
                entries: Vec::new(),
                score,
                reason: format!("{source}; {closest}"),
                by_meaning: false,
                status: SuggestionStatus::Pending,
                created_at: now,
                resolved_at: None,
                proposal: Some(proposal),
            };
            outcome.suggested.push(SuggestedEntry {
                suggestion_id: s.id.to_string(),
                entry_type: entry.entry_type.to_string(),
                title: entry.title.clone(),
            });
            new.push(s);
        }
        if new.is_empty() {
            return Ok(outcome);
        }
        suggestions::store(self, &new)?;
        self.store.flush()?;
        drop(cache);
        Ok(outcome)
    }
}

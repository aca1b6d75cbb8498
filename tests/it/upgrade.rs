//! A data dir written by an earlier format opens after an upgrade, with everything in it.
//!
//! `tests/data/format-1-home.tar.gz` is a data dir written by tandem 0.1.0 in format 1
//! (sled without compression): three entries (one with a context, all with vectors of the
//! test model), a link, a link suggestion, a workflow with a completed task and a decision,
//! and its search index. `tests/data/format-2-home.tar.gz` is that data dir opened by
//! tandem at format 2 (sled compressing its pages), then 1,200 entries imported ("The
//! {thing} {failure} under load ({i})"). `tests/data/format-3-home.tar.gz` is the format 1
//! data dir opened by tandem at format 3, then 40 entries imported ("Imported finding
//! {i}", the decision updated between the 20th and the 21st) and one added ("Added last in
//! format 3"). `tests/data/format-4-home.tar.gz` is a new data dir written by tandem at
//! format 4: thirteen entries added, twelve in three groups of near-duplicates, which made
//! link and generalisation suggestions, one of them then rejected and one accepted.
//! `tests/data/format-5-home.tar.gz` is that data dir opened by tandem at format 5, then
//! four near-duplicate entries added ("Connection pool exhausted by burst traffic
//! ({i})"), which made links and a generalisation of the four: format 5 kept a key for each
//! suggestion, where only an entry suggestion's is ever looked up.

use serde_json::Value;

use crate::util::{TestHome, succeeds, succeeds_json};

const PITFALL: &str = "01M87VTPSBR0G4PARCSARSFC60";
const DECISION: &str = "01M87VTPSFT8WD87QF9Q7DDKTG";
const TASK: &str = "01M87VTPT4FYKZE8VN9SNVXNQS";

/// The fixture of `format` unpacked as `home`'s data dir.
fn home_of_format(format: u32) -> TestHome {
    let home = TestHome::new();
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    let archive = format!(
        "{}/tests/data/format-{format}-home.tar.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let status = std::process::Command::new("tar")
        .args(["-xzf", &archive, "-C"])
        .arg(home.tandem_home())
        .status()
        .unwrap();
    assert!(status.success());
    home
}

/// `tandem args` on `home`'s data dir.
fn tandem(home: &TestHome, args: &[&str]) -> std::process::Command {
    let mut cmd = home.std_command();
    cmd.args(args);
    cmd
}

fn format_of(home: &TestHome) -> Value {
    let text = std::fs::read_to_string(home.tandem_home().join("format.json")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["format"].clone()
}

#[test]
fn a_format_1_data_dir_is_upgraded_with_everything_in_it() {
    let home = home_of_format(1);
    assert_eq!(format_of(&home), 1);
    let run = |args: &[&str]| tandem(&home, args);

    let shown = succeeds_json(run(&["memory", "show", PITFALL]));
    assert_eq!(format_of(&home), tandem_core::store::FORMAT_VERSION);
    assert!(!home.tandem_home().join("db.format-1").exists());
    assert!(!home.tandem_home().join("db.upgrading").exists());
    assert_eq!(
        shown["title"],
        "Safari rejects ISO dates without a colon in the offset"
    );
    assert_eq!(shown["context"], "web/date.ts while fixing the calendar");
    assert_eq!(shown["embeddings"]["summary"], true, "{shown}");
    assert_eq!(shown["embeddings"]["context"], true, "{shown}");
    assert_eq!(shown["links"]["outgoing"][0]["target_id"], DECISION);

    let found = succeeds_json(run(&["memory", "search", "safari offset"]));
    assert_eq!(found["results"][0]["id"], PITFALL, "{found}");
    let suggestions = succeeds(run(&["memory", "suggestions"]));
    assert!(suggestions.contains("1 pending"), "{suggestions}");
    let task = succeeds_json(run(&["tasks", "show", TASK]));
    assert_eq!(task["name"], "Parse offsets");
    assert_eq!(task["status"], "success");
    assert_eq!(task["decisions"][0]["chosen"], "+00:00");

    // Written after the upgrade, read back after a reopen.
    let added = succeeds_json(run(&[
        "memory",
        "add",
        "--type",
        "pattern",
        "--title",
        "Compressed pages",
        "--content",
        "Written in format 2.",
    ]));
    let again = succeeds_json(run(&["memory", "show", added["id"].as_str().unwrap()]));
    assert_eq!(again["content"], "Written in format 2.");
    assert_eq!(format_of(&home), tandem_core::store::FORMAT_VERSION);
}

/// An upgrade cut short at each step resumes at the next open: a half-written new
/// database is written again (or removed, when none is wanted), and an old one set aside
/// with no `db` is put back.
#[test]
fn an_upgrade_cut_short_resumes() {
    for format in [1, 2] {
        for cut in ["half-written copy", "old database set aside"] {
            let home = home_of_format(format);
            let dir = home.tandem_home();
            let old = format!("db.format-{format}");
            match cut {
                "half-written copy" => {
                    std::fs::create_dir_all(dir.join("db.upgrading")).unwrap();
                    std::fs::write(dir.join("db.upgrading/db"), b"not a database").unwrap();
                }
                _ => std::fs::rename(dir.join("db"), dir.join(&old)).unwrap(),
            }
            let shown = succeeds_json(tandem(&home, &["memory", "show", DECISION]));
            assert_eq!(
                shown["title"], "Store timestamps as UTC ISO strings with a colon offset",
                "{format}: {cut}"
            );
            assert_eq!(
                format_of(&home),
                tandem_core::store::FORMAT_VERSION,
                "{cut}"
            );
            assert!(!dir.join("db.upgrading").exists(), "{format}: {cut}");
            assert!(!dir.join(&old).exists(), "{format}: {cut}");
        }
    }
}

/// Format 2 (sled compressing its pages) is copied into a database sled does not compress,
/// and its entries, enough to train a dictionary on, are compressed by the memory.
#[test]
fn a_format_2_data_dir_is_upgraded_and_its_entries_compressed() {
    let home = home_of_format(2);
    assert_eq!(format_of(&home), 2);
    let run = |args: &[&str]| tandem(&home, args);
    let shown = succeeds_json(run(&["memory", "show", PITFALL]));
    assert_eq!(format_of(&home), tandem_core::store::FORMAT_VERSION);
    assert!(!home.tandem_home().join("db.format-2").exists());
    assert!(!home.tandem_home().join("db.upgrading").exists());
    assert_eq!(shown["context"], "web/date.ts while fixing the calendar");
    assert_eq!(shown["links"]["outgoing"][0]["target_id"], DECISION);
    let found = succeeds_json(run(&["memory", "search", "socket deadlocks (34)"]));
    assert_eq!(
        found["results"][0]["title"],
        "The socket deadlocks under load (34)"
    );
    let task = succeeds_json(run(&["tasks", "show", TASK]));
    assert_eq!(task["decisions"][0]["chosen"], "+00:00");

    // Every record is a zstd frame now, packed by the copy (but those written since: the
    // entries shown), and the export holds every entry.
    let store = tandem_core::store::Store::open(&home.tandem_home()).unwrap();
    let entries = store.db().open_tree("memory.entries").unwrap();
    assert_eq!(entries.len(), 1203);
    let values: Vec<_> = entries.iter().values().map(Result::unwrap).collect();
    assert!(values.iter().all(|v| {
        store
            .record(v)
            .unwrap()
            .starts_with(&[0x28, 0xB5, 0x2F, 0xFD])
    }));
    let packed = values
        .iter()
        .filter(|v| tandem_core::pack::is_pointer(v))
        .count();
    assert!(packed >= 1190, "{packed}");
    drop((values, entries, store));
    let exported = succeeds(run(&["memory", "export"]));
    assert_eq!(
        exported.lines().count(),
        1203 + 1,
        "1,203 entries and the link"
    );
    assert!(exported.contains("Fixed by bounding it."));
}

/// Format 3 kept a record a write in `memory.by_seq`; the memory moves them into
/// `memory.writes` as it opens. The recent entries keep their order, an entry an import
/// replaced listed once, where it was written again, and a write after the upgrade comes
/// first.
#[test]
fn a_format_3_data_dir_keeps_the_order_of_its_writes() {
    use std::sync::Arc;
    use tandem_core::memory::{Memory, NoProgress};

    let home = home_of_format(3);
    assert_eq!(format_of(&home), 3);
    let recent = |limit: usize| -> Vec<String> {
        let store = Arc::new(tandem_core::store::Store::open(&home.tandem_home()).unwrap());
        let memory = Memory::open(store.clone(), &NoProgress).unwrap();
        let names = store.db().tree_names();
        assert!(!names.iter().any(|n| n == b"memory.by_seq"), "{names:?}");
        let titles = memory.recent(limit).unwrap();
        titles.into_iter().map(|e| e.title).collect()
    };
    let mut expected = vec!["Added last in format 3".to_string()];
    expected.extend((21..=40).rev().map(|i| format!("Imported finding {i}")));
    expected.push("Store timestamps as UTC ISO strings with a colon offset".into());
    expected.extend((1..=20).rev().map(|i| format!("Imported finding {i}")));
    expected.push("Pin the sled cache to 64 MB".into());
    expected.push("Safari rejects ISO dates without a colon in the offset".into());
    assert_eq!(recent(100), expected);
    assert_eq!(format_of(&home), tandem_core::store::FORMAT_VERSION);

    let run = |args: &[&str]| tandem(&home, args);
    succeeds_json(run(&[
        "memory",
        "add",
        "--type",
        "pattern",
        "--title",
        "Added after the upgrade",
        "--content",
        "Written after the upgrade.",
    ]));
    assert_eq!(
        recent(3),
        [
            "Added after the upgrade",
            "Added last in format 3",
            "Imported finding 40"
        ]
    );
    let found = succeeds_json(run(&["memory", "search", "imported finding 33"]));
    assert_eq!(
        found["results"][0]["title"], "Imported finding 33",
        "{found}"
    );
}

/// Format 4 listed the pending suggestions by reading every suggestion ever made; format 5
/// keeps them in the order they are listed, an index the memory builds as it opens an
/// older data dir. The listing is the one format 4 printed, and a suggestion resolved after
/// the upgrade leaves it.
#[test]
fn a_format_4_data_dir_lists_its_pending_suggestions_as_before() {
    let home = home_of_format(4);
    assert_eq!(format_of(&home), 4);
    let run = |args: &[&str]| tandem(&home, args);
    let ids = |listed: &Value, kind: &str| -> Vec<String> {
        let suggestions = listed[kind]["suggestions"].as_array().unwrap();
        suggestions
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    let listed = succeeds_json(run(&["memory", "suggestions"]));
    assert_eq!(format_of(&home), tandem_core::store::FORMAT_VERSION);
    let links = [
        "01M8EHWJPYV8HFMM43FF02ZKJG",
        "01M8EHWJWP1WZBD6NDGT47DQD0",
        "01M8EHWJWP136HM5NHAHEXNC6C",
        "01M8EHWJCSDD0SC0NAK9Q0BZ4V",
        "01M8EHW9GM028J2ERAT41B85F1",
        "01M8EHW9P6A4QVV9KJFG1ACSXB",
        "01M8EHW9P69FQ14J6TH8YJBFVZ",
    ];
    assert_eq!(ids(&listed, "links"), links, "{listed}");
    assert_eq!(listed["links"]["total_pending"], 7);
    assert_eq!(
        ids(&listed, "generalize"),
        [
            "01M8EHWJWPSS7MGPV87WP8SN3T",
            "01M8EHWJCSVDX2MRJMYEPYWBHJ",
            "01M8EHW9P60DGE0RAS033N8MRE"
        ],
        "{listed}"
    );
    assert_eq!(listed["generalize"]["total_pending"], 3);

    succeeds(run(&["memory", "reject", links[1]]));
    let listed = succeeds_json(run(&[
        "memory",
        "suggestions",
        "--kind",
        "link",
        "--limit",
        "3",
    ]));
    assert_eq!(
        ids(&listed, "links"),
        [links[0], links[2], links[3]],
        "{listed}"
    );
    assert_eq!(listed["links"]["total_pending"], 6);

    // Format 4's JSON records and text keys were written again in binary: each
    // suggestion, and its key naming it.
    let store = tandem_core::store::Store::open(&home.tandem_home()).unwrap();
    let db = store.db();
    let (records, keys) = (
        db.open_tree("memory.suggestions").unwrap(),
        db.open_tree("memory.suggestion_keys").unwrap(),
    );
    assert_eq!(records.len(), 12);
    for item in records.iter() {
        let (id, record) = item.unwrap();
        assert_ne!(record.first(), Some(&b'{'), "still JSON: {id:?}");
        let s = tandem_core::memory::Suggestion::from_record(&record).unwrap();
        assert_eq!(s.id.to_string().as_bytes(), &id[..]);
        assert_eq!(
            s.remembered_key(),
            None,
            "a link or a generalisation: {s:?}"
        );
    }
    // Only an entry suggestion's key is kept, and these are links and generalisations.
    assert_eq!(keys.len(), 0);
    assert!(
        !db.tree_names()
            .iter()
            .any(|n| n == b"memory.suggestions_by_entry")
    );
}

#[test]
fn a_format_5_data_dir_forgets_the_keys_of_its_links_and_generalisations() {
    let home = home_of_format(5);
    assert_eq!(format_of(&home), 5);
    // The first byte of each key (its kind's tag), and how many suggestions there are.
    let keys = || {
        let store = tandem_core::store::Store::open(&home.tandem_home()).unwrap();
        let db = store.db();
        let tree = db.open_tree("memory.suggestion_keys").unwrap();
        let tags: Vec<u8> = tree.iter().keys().map(|k| k.unwrap()[0]).collect();
        (tags, db.open_tree("memory.suggestions").unwrap().len())
    };
    let (kept, suggestions) = keys();
    let (link, generalize) = (
        tandem_core::memory::SuggestionKind::Link.tag(),
        tandem_core::memory::SuggestionKind::Generalize.tag(),
    );
    assert!(suggestions > 12, "{suggestions}");
    assert_eq!(kept.len(), suggestions, "{kept:?}");
    assert!(
        kept.iter().all(|t| [link, generalize].contains(t)),
        "{kept:?}"
    );

    let run = |args: &[&str]| tandem(&home, args);
    let listed = succeeds_json(run(&["memory", "suggestions", "--limit", "20"]));
    assert_eq!(listed["links"]["total_pending"], 13, "{listed}");
    assert_eq!(listed["generalize"]["total_pending"], 4, "{listed}");
    assert_eq!(
        keys(),
        (Vec::new(), suggestions),
        "the keys are forgotten at open"
    );

    // Generalising the group a pending suggestion names (in another order) still
    // resolves that suggestion: it is found among its entries' suggestions.
    const GROUP: &str = "01M8H8CTMFREDWKFFKYWFM4FDR";
    let group = [
        "01M8H8CTAMT5ED6JSBKVM88MQD",
        "01M8H8CTH8FZ3C5RVKA3FC48RQ",
        "01M8H8CTDZPZKA4Q2KN2FX0P7N",
        "01M8H8CTMEXM8RQEMFJEK8GT9E",
    ];
    let pending = |listed: &Value| -> Vec<String> {
        listed["generalize"]["suggestions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(pending(&listed).iter().any(|id| id == GROUP), "{listed}");
    let mut generalize = vec!["memory", "generalize"];
    generalize.extend(group);
    succeeds_json(run(&generalize));
    let listed = succeeds_json(run(&["memory", "suggestions", "--kind", "generalize"]));
    assert_eq!(listed["generalize"]["total_pending"], 3, "{listed}");
    assert!(!pending(&listed).iter().any(|id| id == GROUP), "{listed}");
    let resolved = run(&["memory", "reject", GROUP]).output().unwrap();
    let said = String::from_utf8_lossy(&resolved.stderr);
    assert!(
        !resolved.status.success() && said.contains("SUGGESTION_ALREADY_RESOLVED"),
        "{said}"
    );
    assert!(said.contains("accepted"), "{said}");
}

/// Format 6 lets a compaction pack the entries' records (`crates/core/src/pack.rs`): a format 5 data
/// dir opens as it was, and a compaction then packs its records, which read back the same.
#[test]
fn a_format_5_data_dir_opens_and_a_compaction_packs_its_entries() {
    let home = home_of_format(5);
    let run = |args: &[&str]| tandem(&home, args);
    let exported = succeeds(run(&["memory", "export"]));
    assert_eq!(format_of(&home), tandem_core::store::FORMAT_VERSION);
    assert!(exported.lines().count() > 17, "{exported}");
    let pack = home.tandem_home().join("db").join(tandem_core::pack::FILE);
    assert!(!pack.exists());
    let c = succeeds_json(run(&["memory", "compact"]));
    assert_eq!(c["rewritten"], true, "{c}");
    assert!(pack.exists());
    assert_eq!(succeeds(run(&["memory", "export"])), exported);
    let found = succeeds_json(run(&["memory", "search", "connection pool exhausted"]));
    assert!(
        found["results"][0]["title"]
            .as_str()
            .unwrap()
            .starts_with("Connection pool exhausted by burst traffic"),
        "{found}"
    );
}

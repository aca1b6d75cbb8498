//! Crash safety: `kill -9` in the middle of a burst of adds loses no acknowledged entry.

use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::util::TestHome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_burst_loses_no_acknowledged_add() {
    let home = TestHome::new();
    let c = Arc::new(home.mcp().await);
    let pid = c.pid.unwrap();
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4 {
        let (c, acked) = (c.clone(), acked.clone());
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let word = format!("crashw{w}n{i}");
                let args = json!({"type": "bug", "title": format!("Burst entry {word}"), "content": format!("Written by writer {w}, number {i}.")});
                match c.try_call("rekall_add", args).await {
                    Ok(r) if r.is_error != Some(true) => {
                        let id = r.structured_content.unwrap()["id"].as_str().unwrap().to_string();
                        acked.lock().unwrap().push((id, word));
                    }
                    _ => return,
                }
            }
        }));
    }
    // Let the burst run, then kill the server without warning while adds are in flight.
    // Before 128 writes the index has committed none of them (it commits every 128 pending
    // writes, or on a pause or a search), so the restart has to repair it from sled.
    while acked.lock().unwrap().len() < 100 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 100);

    let c = home.mcp().await;
    let log = home.log();
    assert!(
        log.contains("search index behind") || log.contains("rebuilding the search index"),
        "the restart should have repaired the index from sled"
    );
    for (id, word) in &acked {
        let shown = c.ok("rekall_show", json!({"id": id})).await;
        assert_eq!(shown["title"], format!("Burst entry {word}"));
        let found = c.ok("rekall_search", json!({"query": word})).await;
        assert_eq!(
            found["results"][0]["id"],
            id.as_str(),
            "{word} not searchable after the crash"
        );
    }
    c.close().await;
}

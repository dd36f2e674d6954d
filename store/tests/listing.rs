//! The listing file (objects-format.md, "Listing"): its bytes pinned by the
//! spec, and what makes a reader refuse one.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::collections::BTreeMap;

use sessctl_store::index::ConversationInfo;
use sessctl_store::listing::{self, Listing, Stamp, LISTING_FORMAT_VERSION};
use sessctl_store::object::Usage;
use sessctl_store::refs::{ConversationRecord, ConversationStatus};

fn example() -> (Stamp, ConversationInfo) {
    let id = support::examples().root.id();
    let stamp = Stamp {
        segment: 1,
        segment_len: 1234,
        op_seq: 7,
        op_hash: [0xab; 32],
    };
    let info = ConversationInfo {
        name: "fix".into(),
        record: ConversationRecord {
            conversation_id: Some(id),
            title: Some("Fix CI".into()),
            default_preset_id: None,
            metadata: BTreeMap::new(),
            status: ConversationStatus::Active,
            created_at: 1_763_000_000_000,
            updated_at: 1_763_000_000_500,
        },
        head: Some(id),
        last_activity: 1_763_000_000_500,
        messages: 2,
        sessions: 1,
        usage: Usage::default(),
        preview: "hello".into(),
        running: None,
    };
    (stamp, info)
}

#[test]
fn the_spec_pins_the_listing_bytes() {
    let (stamp, info) = example();
    let bytes = listing::encode(&stamp, true, std::slice::from_ref(&info));
    let spec = support::spec();
    assert!(
        spec.contains(&support::dump(&bytes[..80])),
        "objects-format.md lacks the listing header dump:\n{}",
        support::dump(&bytes[..80])
    );
    let sum = blake3::hash(&bytes).to_hex().to_string();
    assert!(spec.contains(&sum), "objects-format.md lacks {sum}");
    assert!(spec.contains(&format!("({} bytes)", bytes.len())));
    assert!(spec.contains(&format!(
        "`LISTING_FORMAT_VERSION` ({LISTING_FORMAT_VERSION})"
    )));
    let back = listing::decode(&bytes).unwrap();
    assert_eq!(
        back,
        Listing {
            stamp,
            complete: true,
            conversations: vec![info],
        }
    );
}

#[test]
fn damage_of_any_byte_makes_it_unreadable() {
    let (stamp, info) = example();
    let bytes = listing::encode(&stamp, false, &[info.clone(), info]);
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 1;
        assert!(listing::decode(&b).is_none(), "byte {i} flipped");
    }
    for cut in 0..bytes.len() {
        assert!(listing::decode(&bytes[..cut]).is_none(), "cut at {cut}");
    }
}

#[test]
fn select_answers_only_what_the_listing_can_tell() {
    let (stamp, mut info) = example();
    let mut archived = info.clone();
    archived.name = "old".into();
    archived.record.status = ConversationStatus::Archived;
    let l = Listing {
        stamp,
        complete: false,
        conversations: vec![info.clone(), archived.clone()],
    };
    let active = |c: &ConversationInfo| c.record.status == ConversationStatus::Active;
    assert_eq!(l.select(Some(1), active).unwrap().len(), 1);
    // Two active ones may exist beyond what it holds.
    assert!(l.select(Some(2), active).is_none());
    assert!(l.select(None, |_| true).is_none());
    let complete = Listing {
        complete: true,
        ..l.clone()
    };
    assert_eq!(complete.select(None, active).unwrap(), vec![info.clone()]);
    // An open run is the index's to judge (its process may be gone).
    info.running = Some(sessctl_store::index::RunClaim {
        run: 3,
        pid: 1,
        started_at: 0,
    });
    let running = Listing {
        complete: true,
        conversations: vec![info, archived],
        ..l
    };
    assert!(running.select(None, |_| true).is_none());
    assert_eq!(
        running
            .select(None, |c| c.record.status == ConversationStatus::Archived)
            .unwrap()
            .len(),
        1
    );
}

//! Opening task ids: any text is a task or nothing, never a panic; a sealed id opens to
//! what was sealed; a changed id never opens to another task.

use mediagate::tasks::{MediaKind, TaskId, TaskSealer};
use proptest::prelude::*;

fn sealer() -> TaskSealer {
    TaskSealer::new(
        b"fuzz-task-secret-of-at-least-32-characters",
        &[b"older-fuzz-task-secret-of-32-characters".to_vec()],
    )
}

fn task() -> impl Strategy<Value = TaskId> {
    (
        "[a-z0-9_-]{1,40}",
        "\\PC{1,300}",
        "\\PC{1,60}",
        "[a-z0-9-]{1,40}",
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(provider, upstream_id, model, owner, image, created)| TaskId {
                provider,
                upstream_id,
                model,
                kind: if image {
                    MediaKind::Image
                } else {
                    MediaKind::Video
                },
                owner,
                created,
                openai: created % 2 == 1,
            },
        )
}

proptest! {
    #[test]
    fn any_text_opens_to_a_task_or_nothing(id in "task_[A-Za-z0-9_-]{0,400}|\\PC{0,200}") {
        let _ = sealer().open(&id);
    }

    #[test]
    fn sealed_ids_open_and_changed_ones_never_open_to_another(
        task in task(),
        at in any::<prop::sample::Index>(),
        to in "[A-Za-z0-9_-]",
    ) {
        let s = sealer();
        let Ok(id) = s.seal(&task) else { return Ok(()) };
        let opened = s.open(&id).expect("a sealed id opens");
        prop_assert_eq!(&opened.upstream_id, &task.upstream_id);
        prop_assert_eq!(&opened.owner, &task.owner);
        let mut changed: Vec<char> = id.chars().collect();
        let i = at.index(changed.len());
        changed[i] = to.chars().next().unwrap();
        let changed: String = changed.into_iter().collect();
        if let Some(other) = s.open(&changed) {
            // Only a change in the unused bits of the last character can keep the id.
            prop_assert_eq!(other.upstream_id, task.upstream_id);
            prop_assert_eq!(other.owner, task.owner);
        }
    }
}

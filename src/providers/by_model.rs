//! Values computed once per model, for the programs whose output depends on nothing
//! but the model (a request plan's target, a submit body's model fields): keyed by
//! the model's name, upstream name and kind, as `JqVars::model_values` gives them.

use crate::FastMap;

/// Values by model, for programs that read nothing else. Read on every request by
/// every serving thread, added to once per model: a map swapped whole.
pub(super) struct ByModel<T> {
    by_model: arc_swap::ArcSwap<Models<T>>,
}

/// Values by model name.
type Models<T> = FastMap<Box<[u8]>, Vec<ForModel<T>>>;

/// The value of one model (its name is the map's key).
#[derive(Clone)]
struct ForModel<T> {
    upstream_model: Box<[u8]>,
    kind: Box<[u8]>,
    value: T,
}

/// Values past which a [`ByModel`] keeps no more (they are computed per request
/// again): it holds the configured models, and a task id can only name a model the
/// gateway once served.
const MAX_BY_MODEL: usize = 1024;

impl<T> Default for ByModel<T> {
    fn default() -> Self {
        Self {
            by_model: Default::default(),
        }
    }
}

impl<T: Clone> ByModel<T> {
    pub(super) fn get(&self, [model, upstream_model, kind]: [&[u8]; 3]) -> Option<T> {
        let by_model = self.by_model.load();
        let known = by_model
            .get(model)?
            .iter()
            .find(|v| *v.upstream_model == *upstream_model && *v.kind == *kind)?;
        Some(known.value.clone())
    }

    pub(super) fn add(&self, [model, upstream_model, kind]: [&[u8]; 3], value: T) {
        if Self::count(&self.by_model.load()) >= MAX_BY_MODEL {
            return;
        }
        self.by_model.rcu(|by_model| {
            let mut by_model = FastMap::clone(by_model);
            if Self::count(&by_model) < MAX_BY_MODEL {
                by_model.entry(model.into()).or_default().push(ForModel {
                    upstream_model: upstream_model.into(),
                    kind: kind.into(),
                    value: value.clone(),
                });
            }
            by_model
        });
    }

    /// How many values are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        Self::count(&self.by_model.load())
    }

    fn count(by_model: &Models<T>) -> usize {
        by_model.values().map(Vec::len).sum()
    }
}

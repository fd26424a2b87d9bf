//! A mutex's guard even after a panic elsewhere poisoned it: the dispatcher's shared
//! state stays usable (each holder leaves it consistent between statements).

use std::sync::{Mutex, MutexGuard};

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

//! How one dispatcher shares its delivery slots (`delivery.concurrency`) between
//! destinations, so that one slow destination's backlog cannot hold every slot while the
//! others wait.
//!
//! With more than one destination configured, a destination may have at most
//! `concurrency / (n + 2)` deliveries waiting for its answer — at least one — where `n`
//! is the number of *other* destinations with deliveries waiting for theirs here: an
//! equal share with the destinations that are sending, and one share kept free for a
//! destination that starts to. Alone, a destination takes half the slots; the other half
//! waits for whoever has work next. A destination over its share (it took slots while the
//! others were quiet) keeps the deliveries it has out and is leased nothing more until it
//! is back under. While some destination is idle, none is leased into the share kept for
//! the next one to start — except that a destination with nothing out may always take
//! one free slot — so slow destinations arriving one after another run the slots out
//! only after about 2√concurrency of them (30 of 256), not 3. What counts is the wait for the destination's answer — the one thing a
//! slow destination makes long; recording the outcome afterwards is the database's work
//! and the same for all. The explicit cap across instances stays `max_in_flight`; this is
//! per instance, by default.

use crate::delivery::DestinationKey;
use std::collections::{HashMap, HashSet};

/// A destination sharing the slots.
type Key = DestinationKey;

/// One lease round's view of the slots: how many are in flight per destination.
#[derive(Debug, Clone, Default)]
pub struct Shares {
    /// `None`: at most one destination is configured, there is nothing to share.
    concurrency: Option<u32>,
    /// Destinations configured.
    destinations: usize,
    /// Deliveries waiting for each destination's answer.
    flying: HashMap<Key, u32>,
    /// Deliveries waiting for destinations set aside (see [`Shares::set_aside`]).
    elsewhere: u32,
}

impl Shares {
    /// Shares of `concurrency` slots between `destinations` configured destinations, with
    /// `flying` deliveries in flight per destination now.
    pub fn new(concurrency: u32, destinations: usize, flying: HashMap<Key, u32>) -> Self {
        let flying: HashMap<Key, u32> = flying.into_iter().filter(|(_, n)| *n > 0).collect();
        Self {
            concurrency: (destinations > 1).then_some(concurrency.max(1)),
            destinations,
            flying,
            elsewhere: 0,
        }
    }

    /// The shares when `held` configured destinations can take no slot this round (an
    /// open breaker): they are no destination to keep room for, so a destination whose
    /// only company is held has every slot; what they still have out fills slots.
    pub fn without_held(self, held: &HashSet<Key>) -> Self {
        let destinations = self.destinations.saturating_sub(held.len());
        Self {
            concurrency: self.concurrency.filter(|_| destinations > 1),
            destinations,
            ..self
        }
        .set_aside(|key| held.contains(key))
    }

    /// Sets the destinations `aside` picks apart from those that share: held by an open
    /// breaker, or no longer configured (removed by a reload, deliveries still out).
    /// Their deliveries still fill slots, but they are no destination to share with.
    pub fn set_aside(mut self, aside: impl Fn(&Key) -> bool) -> Self {
        let (apart, sharing): (HashMap<Key, u32>, HashMap<Key, u32>) =
            self.flying.into_iter().partition(|(key, _)| aside(key));
        self.elsewhere = (apart.values()).fold(self.elsewhere, |sum, n| sum.saturating_add(*n));
        self.flying = sharing;
        self
    }

    /// The slots `key` may hold now (`None`: no limit).
    #[cfg(test)]
    pub fn share_of(&self, key: &Key) -> Option<u32> {
        let concurrency = self.concurrency?;
        Some(share(concurrency, self.others_than(key)))
    }

    /// How many more deliveries `key` may be leased now (`None`: no limit).
    pub fn room(&self, key: &Key) -> Option<u32> {
        self.concurrency?;
        let flying = self.flying.get(key).copied().unwrap_or(0);
        Some(self.room_with(flying, self.others_than(key)))
    }

    /// The most that can be leased in one statement for every destination at once
    /// without any passing its share or the room kept for newcomers: the smallest room
    /// of a destination in flight and, while some configured destination has nothing in
    /// flight, of one that starts to (`None`: no limit).
    pub fn common_room(&self) -> Option<u32> {
        self.concurrency?;
        let newcomer =
            (self.flying.len() < self.destinations).then(|| self.room_with(0, self.flying.len()));
        let busiest = self.flying.keys().filter_map(|key| self.room(key)).min();
        match (busiest, newcomer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Counts `n` more deliveries of `key` waiting for its answer (leased this round).
    pub fn took(&mut self, key: &Key, n: usize) {
        if n > 0 {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            let flying = self.flying.entry(key.clone()).or_default();
            *flying = flying.saturating_add(n);
        }
    }

    /// Destinations other than `key` with deliveries waiting for their answer.
    fn others_than(&self, key: &Key) -> usize {
        self.flying.keys().filter(|k| *k != key).count()
    }

    /// The room of a destination with `flying` deliveries out beside `others` sending:
    /// what is left of its share, and no more than leaves the next newcomer's share free
    /// while some destination is idle — except that one with nothing out may always take
    /// one slot of what is free, out of the room kept for it.
    fn room_with(&self, flying: u32, others: usize) -> u32 {
        let Some(concurrency) = self.concurrency else {
            return u32::MAX;
        };
        let by_share = share(concurrency, others).saturating_sub(flying);
        let waiting = (self.flying.values()).fold(self.elsewhere, |sum, n| sum.saturating_add(*n));
        let free = concurrency.saturating_sub(waiting);
        let sending = others + 1;
        let kept = match sending < self.destinations {
            true => share(concurrency, sending),
            false => 0,
        };
        let room = by_share.min(free.saturating_sub(kept));
        match flying == 0 && free > 0 {
            true => room.max(1),
            false => room,
        }
    }
}

/// A destination's share of `concurrency` slots beside `others` sending: an equal share
/// with them and one kept for a destination that starts to; at least one.
fn share(concurrency: u32, others: usize) -> u32 {
    let others = u32::try_from(others).unwrap_or(u32::MAX);
    (concurrency / others.saturating_add(2)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        crate::delivery::DestinationKey::stored("source".to_owned(), name.to_owned())
    }

    fn flying(pairs: &[(&str, u32)]) -> HashMap<Key, u32> {
        pairs.iter().map(|(name, n)| (key(name), *n)).collect()
    }

    #[test]
    fn one_destination_takes_every_slot() {
        let shares = Shares::new(16, 1, flying(&[("a", 16)]));
        assert_eq!(shares.room(&key("a")), None);
        assert_eq!(shares.common_room(), None);
    }

    #[test]
    fn alone_a_destination_takes_half_and_leaves_half_for_the_next() {
        let idle = Shares::new(16, 3, HashMap::new());
        assert_eq!(idle.common_room(), Some(8));
        let slow = Shares::new(16, 3, flying(&[("slow", 8)]));
        assert_eq!(slow.room(&key("slow")), Some(0));
        // A destination that starts sending shares with the one in flight (16 / 3 = 5)
        // but leaves the next newcomer's share free (16 / 4 = 4 of the 8 free).
        assert_eq!(slow.share_of(&key("fast")), Some(5));
        assert_eq!(slow.room(&key("fast")), Some(4));
        assert_eq!(slow.common_room(), Some(0));
    }

    #[test]
    fn with_every_destination_sending_there_is_no_newcomer_to_keep_room_for() {
        let both = Shares::new(256, 2, flying(&[("a", 20), ("b", 30)]));
        assert_eq!(both.share_of(&key("a")), Some(85));
        assert_eq!(both.common_room(), Some(55));
        // A third, idle destination: room is kept for it (256 / 4 = 64 < 85 - 10).
        let one_idle = Shares::new(256, 3, flying(&[("a", 10), ("b", 10)]));
        assert_eq!(one_idle.common_room(), Some(64));
        let both_again = Shares::new(256, 2, flying(&[("a", 10), ("b", 10)]));
        assert_eq!(both_again.common_room(), Some(75));
    }

    #[test]
    fn a_destination_over_its_share_gets_nothing_more_until_back_under() {
        let shares = Shares::new(16, 3, flying(&[("slow", 8), ("fast", 1)]));
        assert_eq!(shares.share_of(&key("slow")), Some(5));
        assert_eq!(shares.room(&key("slow")), Some(0));
        // 4 left of its share, but 16 / 4 = 4 of the 7 free are kept for `third`.
        assert_eq!(shares.room(&key("fast")), Some(3));
        assert_eq!(shares.room(&key("third")), Some(4));
    }

    #[test]
    fn a_destination_whose_only_company_is_held_has_every_slot() {
        let held: HashSet<Key> = [key("h")].into();
        let shares = Shares::new(16, 2, flying(&[("a", 12)])).without_held(&held);
        assert_eq!(shares.room(&key("a")), None);
        let three = Shares::new(16, 3, flying(&[("a", 8)])).without_held(&held);
        assert_eq!(three.room(&key("a")), Some(0));
    }

    /// A held or removed destination's deliveries still out fill slots, but it is no
    /// sender: the room kept for a newcomer does not count it, and what may be leased
    /// together never exceeds any destination's room.
    #[test]
    fn deliveries_set_aside_fill_slots_but_share_nothing() {
        let gone = |k: &Key| k == &key("removed");
        let shares = Shares::new(256, 2, flying(&[("a", 10), ("removed", 10)])).set_aside(gone);
        assert_eq!(
            shares.room(&key("b")),
            Some(85),
            "256 / 3: a is b's only company"
        );
        assert!(shares.common_room() <= shares.room(&key("b")));
        assert!(shares.common_room() <= shares.room(&key("a")));
        let full = Shares::new(16, 3, flying(&[("a", 2), ("held", 14)]))
            .without_held(&[key("held")].into());
        assert_eq!(
            full.room(&key("b")),
            Some(0),
            "the held destination's 14 fill slots"
        );
    }

    #[test]
    fn every_destination_gets_at_least_one_slot() {
        let many: Vec<(String, u32)> = (0..40).map(|n| (format!("d{n}"), 1)).collect();
        let pairs: Vec<(&str, u32)> = many.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        let shares = Shares::new(64, 41, flying(&pairs));
        assert_eq!(shares.share_of(&key("new")), Some(1));
        assert_eq!(shares.room(&key("new")), Some(1));
        assert_eq!(shares.room(&key("d0")), Some(0));
    }

    /// Slow destinations arriving one after another, each taking all the room it is
    /// given and holding it: the slots run out only after about 2√concurrency of them
    /// (30 of the default 256; before the room kept for newcomers, 3 of any number).
    #[test]
    fn slow_destinations_arriving_in_turn_leave_room_for_many_more() {
        for (concurrency, at_least) in [(4, 3), (16, 5), (64, 9), (256, 30)] {
            let mut shares = Shares::new(concurrency, 1_000, HashMap::new());
            let mut stuck = 0;
            loop {
                let slow = key(&format!("slow-{stuck:03}"));
                let room = shares.room(&slow).expect("shared");
                if room == 0 {
                    break;
                }
                shares.took(&slow, room as usize);
                stuck += 1;
                let taken: u32 = shares.flying.values().sum();
                assert!(taken <= concurrency, "{concurrency} slots: {taken} taken");
            }
            assert!(
                stuck >= at_least,
                "{concurrency} slots: only {stuck} slow destinations before the next waits"
            );
        }
    }
}

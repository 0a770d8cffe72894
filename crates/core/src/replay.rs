//! Anti-replay for sequence-numbered messages from one sender (IPsec's sliding window, RFC 4303
//! §3.4.3): the highest number accepted and which of the 63 before it were seen. A number
//! past the highest is new; one of the window not seen yet is new (reordering is accepted
//! within the window); anything else — seen, or older than the window — is a replay.
//!
//! Used by the pool's control datagrams, redirected data packets, and the AES-GCM NT.

/// Numbers a window remembers below the highest accepted (the highest included).
pub const WINDOW: u64 = 64;

/// One sender's window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    top: u64,
    /// Bit `i`: number `top - i` was accepted.
    seen: u64,
}

impl Window {
    /// A window whose first accepted number is `n`.
    pub fn starting_at(n: u64) -> Window {
        Window { top: n, seen: 1 }
    }

    /// True if `n` would be accepted (changes nothing).
    pub fn check(&self, n: u64) -> bool {
        if n > self.top {
            return true;
        }
        let back = self.top - n;
        back < WINDOW && self.seen & (1 << back) == 0
    }

    /// Records `n` as seen (after [`Window::check`] said it is new).
    pub fn accept(&mut self, n: u64) {
        if n > self.top {
            let shift = n - self.top;
            self.seen = if shift >= WINDOW { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.top = n;
        } else if self.top - n < WINDOW {
            self.seen |= 1 << (self.top - n);
        }
    }

    /// Takes in what `other` accepted (the same sender's numbers seen by another instance):
    /// afterwards a number either window refused is refused.
    pub fn merge(&mut self, other: &Window) {
        let top = self.top.max(other.top);
        let shifted = |w: &Window| if top - w.top >= WINDOW { 0 } else { w.seen << (top - w.top) };
        (self.seen, self.top) = (shifted(self) | shifted(other), top);
    }

    /// [`Window::check`], then [`Window::accept`] if new.
    pub fn admit(&mut self, n: u64) -> bool {
        let new = self.check(n);
        if new {
            self.accept(n);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a reference that remembers every number: a number is admitted iff it was not
        /// admitted before and is within the window of the highest admitted so far.
        #[test]
        fn admits_exactly_the_new_numbers_within_the_window(ns in proptest::collection::vec(0u64..300, 1..400)) {
            let mut w = Window::default();
            let mut seen = std::collections::HashSet::new();
            let mut top: Option<u64> = None;
            for n in ns {
                let expect = !seen.contains(&n) && top.is_none_or(|t| n > t || t - n < WINDOW);
                prop_assert_eq!(w.admit(n), expect, "number {}", n);
                if expect {
                    seen.insert(n);
                    top = Some(top.map_or(n, |t| t.max(n)));
                }
            }
        }
    }

    proptest! {
        /// Two instances that each admitted some of a sender's numbers, merged: a number either
        /// admitted is refused, and a number past both is new.
        #[test]
        fn a_merged_window_refuses_what_either_admitted(ns in proptest::collection::vec((0u64..300, any::<bool>()), 1..300)) {
            let (mut a, mut b) = (Window::default(), Window::default());
            let mut admitted = Vec::new();
            for (n, first) in ns {
                if (if first { &mut a } else { &mut b }).admit(n) {
                    admitted.push(n);
                }
            }
            let mut m = a;
            m.merge(&b);
            for n in admitted {
                prop_assert!(!m.check(n), "number {} was admitted by one of them", n);
            }
            prop_assert_eq!(m.top, a.top.max(b.top));
            prop_assert!(m.check(m.top + 1));
        }
    }

    #[test]
    fn a_replay_is_refused_and_reordering_within_the_window_is_not() {
        let mut w = Window::starting_at(10);
        assert!(!w.admit(10), "seen");
        assert!(w.admit(12) && w.admit(11), "reordered within the window");
        assert!(!w.admit(11));
        assert!(w.admit(12 + WINDOW - 1));
        assert!(!w.admit(12), "now older than the window");
        assert!(w.check(13) && w.check(u64::MAX));
    }
}

//! The AF_XDP backend's per-tenant receive queues (`rx_queues: per_tenant`): the socket has one
//! receive ring for every tenant, so the backend drains it at every poll and puts each frame in
//! the software queue of the tenant whose VNI it carries (queue 0: everyone else's), as the UDP
//! backend's reuseport group does in the kernel. The node then reads a tenant's queue no faster
//! than its ingress limit admits, and a flood fills — and is dropped at — its own queue, counted
//! as that tenant's `rx_queue_full`; the ring itself never fills while the dispatcher drains it,
//! so other tenants' frames are not lost with the flood's (one shared ring lost both tenants'
//! alike beside CPU hogs: weights 1:2.12 where DRF gives 1:3).
//!
//! A queued frame keeps its buffer, so the fill ring gets a spare in its place: the backend
//! holds [`SPARE`] of the node's buffers for that, and the node's free buffers come back as
//! spares when it takes queued frames. A frame that finds its queue full (at most [`PER_QUEUE`],
//! or the depth the node set for a limited tenant) or no spare left goes straight back to the
//! fill ring: dropped, counted for its queue.

use crate::backend::RxMeta;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Buffers the backend holds to put in the fill ring for queued frames (the most frames its
/// queues hold together).
pub const SPARE: usize = 1024;
/// The most frames one queue holds.
pub const PER_QUEUE: usize = 256;
/// The most queues (tenants past it share queue 0).
pub const MAX_QUEUES: usize = 64;

/// One queue.
#[derive(Debug)]
struct Queue {
    frames: VecDeque<(u32, RxMeta)>,
    cap: usize,
    dropped: u64,
}

impl Queue {
    fn new() -> Self {
        Queue { frames: VecDeque::with_capacity(PER_QUEUE), cap: PER_QUEUE, dropped: 0 }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct SoftQueues {
    map: FxHashMap<u32, u16>,
    queues: Vec<Queue>,
    spare: Vec<u32>,
}

impl Default for SoftQueues {
    fn default() -> Self {
        SoftQueues { map: FxHashMap::default(), queues: vec![Queue::new()], spare: Vec::with_capacity(SPARE) }
    }
}

/// The VNI of the VXLAN frame `f` (Ethernet, IPv4, UDP, VXLAN), if it is one.
pub fn vni_of(f: &[u8]) -> Option<u32> {
    if f.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let vx = 14 + 4 * usize::from(f.get(14)? & 0xf) + 8;
    let v = f.get(vx + 4..vx + 7)?;
    Some(u32::from_be_bytes([0, v[0], v[1], v[2]]))
}

impl SoftQueues {
    /// True once tenants have queues of their own.
    pub fn steered(&self) -> bool {
        self.queues.len() > 1
    }

    /// Queues, the shared one included.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// Buffers for the fill ring in place of queued frames.
    pub fn give_spare(&mut self, b: impl IntoIterator<Item = u32>) {
        self.spare.extend(b);
    }

    /// Forgets every frame and spare: their buffers were the old store's (a rebuilt node).
    pub fn reset(&mut self) {
        self.spare.clear();
        self.queues.iter_mut().for_each(|q| q.frames.clear());
    }

    /// Each group of VNIs to a queue of its own: group `i` to queue `i + 1`, groups past
    /// [`MAX_QUEUES`] − 1 to queue 0; the queue of each. Frames of queues no group keeps go to
    /// the spares, counted as their queue's drops.
    pub fn steer(&mut self, groups: &[Vec<u32>]) -> Vec<usize> {
        let n = groups.len().min(MAX_QUEUES - 1);
        self.map.clear();
        for (i, g) in groups.iter().take(n).enumerate() {
            self.map.extend(g.iter().map(|&v| (v, i as u16 + 1)));
        }
        while self.queues.len() > n + 1 {
            if let Some(q) = self.queues.pop() {
                self.spare.extend(q.frames.into_iter().map(|(b, _)| b));
            }
        }
        while self.queues.len() < n + 1 {
            self.queues.push(Queue::new());
        }
        (0..groups.len()).map(|i| if i < n { i + 1 } else { 0 }).collect()
    }

    /// A frame arrived in buffer `b` with `meta`, carrying `vni`: queued, or dropped when its
    /// queue is full or no spare is left. The buffer the fill ring gets in its place.
    #[inline]
    pub fn arrive(&mut self, b: u32, meta: RxMeta, vni: Option<u32>) -> u32 {
        let q = vni.and_then(|v| self.map.get(&v)).map_or(0, |&q| usize::from(q));
        let queue = &mut self.queues[q];
        if queue.frames.len() >= queue.cap {
            queue.dropped += 1;
            return b;
        }
        match self.spare.pop() {
            Some(s) => {
                queue.frames.push_back((b, meta));
                s
            }
            None => {
                queue.dropped += 1;
                b
            }
        }
    }

    /// Takes up to `idx.len()` frames of queue `q` into `idx`/`meta`; the free buffers `idx`
    /// held become spares. How many.
    pub fn take(&mut self, q: usize, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        let Some(queue) = self.queues.get_mut(q) else { return 0 };
        let n = idx.len().min(queue.frames.len());
        for (slot, m) in idx.iter_mut().zip(meta.iter_mut()).take(n) {
            let (b, fm) = queue.frames.pop_front().expect("counted");
            self.spare.push(*slot);
            (*slot, *m) = (b, fm);
        }
        n
    }

    /// True if queue `q` holds frames.
    pub fn has_frames(&self, q: usize) -> bool {
        self.queues.get(q).is_some_and(|x| !x.frames.is_empty())
    }

    /// Frames queue `q` dropped, cumulative.
    pub fn dropped(&self, q: usize) -> u64 {
        self.queues.get(q).map_or(0, |x| x.dropped)
    }

    /// Frames every queue dropped.
    pub fn dropped_all(&self) -> u64 {
        self.queues.iter().map(|x| x.dropped).sum()
    }

    /// Queue `q` holds at most `packets` frames (`None`: [`PER_QUEUE`]).
    pub fn set_cap(&mut self, q: usize, packets: Option<usize>) {
        if let Some(x) = self.queues.get_mut(q) {
            x.cap = packets.map_or(PER_QUEUE, |p| p.clamp(1, PER_QUEUE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(vni: u32) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[42 + 4..42 + 7].copy_from_slice(&vni.to_be_bytes()[1..]);
        f
    }

    #[test]
    fn a_flood_fills_and_is_dropped_at_its_own_queue_and_the_buffers_add_up() {
        assert_eq!(vni_of(&frame(100)), Some(100));
        assert_eq!(vni_of(&[0; 10]), None);
        let mut s = SoftQueues::default();
        s.give_spare(1000..1000 + SPARE as u32);
        assert_eq!(s.steer(&[vec![100], vec![200]]), vec![1, 2]);
        let m = RxMeta::default();
        // Tenant 100 floods 1,000 frames; tenant 200 sends 10, other VNIs 5.
        let mut back = Vec::new();
        for i in 0..1000u32 {
            back.push(s.arrive(i, m, vni_of(&frame(100))));
        }
        for i in 0..10u32 {
            back.push(s.arrive(2000 + i, m, vni_of(&frame(200))));
        }
        for i in 0..5u32 {
            back.push(s.arrive(3000 + i, m, Some(7)));
        }
        assert_eq!((s.dropped(1), s.dropped(2), s.dropped(0)), (1000 - PER_QUEUE as u64, 0, 0));
        // The flood's excess went straight back to the fill ring; each queued frame's place
        // took a spare.
        let recycled = back.iter().filter(|&&b| b < 1000).count();
        assert_eq!(recycled, 1000 - PER_QUEUE);
        let (mut idx, mut meta) = (vec![9000u32, 9001, 9002, 9003], vec![m; 4]);
        assert_eq!(s.take(2, &mut idx, &mut meta), 4);
        assert_eq!(&idx, &[2000, 2001, 2002, 2003]);
        assert!(s.has_frames(2) && s.has_frames(0));
        // A limited tenant's queue is bounded lower.
        s.set_cap(1, Some(10));
        assert_eq!(s.arrive(5000, m, Some(100)), 5000, "over the depth the node set: dropped");
        // Fewer groups: the dropped queue's frames become spares.
        assert_eq!(s.steer(&[vec![100]]), vec![1]);
        assert_eq!(s.queues(), 2);
    }
}

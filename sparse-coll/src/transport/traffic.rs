//! [`Traffic`]: what one rank moved, and the [`TrafficCounter`] the
//! provided [`super::Transport`] of every endpoint ([`super::Endpoint`])
//! keeps it in.

/// Bytes and messages one rank sent and received, and the rounds
/// (send, receive or exchange calls) it took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_recv: u64,
    /// Messages sent.
    pub msgs_sent: u64,
    /// Messages received.
    pub msgs_recv: u64,
    /// Communication rounds: each send, receive or exchange is one.
    pub rounds: u64,
}

impl Traffic {
    /// This traffic and `other` together.
    pub fn plus(&self, other: &Traffic) -> Traffic {
        Traffic {
            bytes_sent: self.bytes_sent + other.bytes_sent,
            bytes_recv: self.bytes_recv + other.bytes_recv,
            msgs_sent: self.msgs_sent + other.msgs_sent,
            msgs_recv: self.msgs_recv + other.msgs_recv,
            rounds: self.rounds + other.rounds,
        }
    }
    /// The traffic between an earlier snapshot and this one.
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            bytes_recv: self.bytes_recv - earlier.bytes_recv,
            msgs_sent: self.msgs_sent - earlier.msgs_sent,
            msgs_recv: self.msgs_recv - earlier.msgs_recv,
            rounds: self.rounds - earlier.rounds,
        }
    }
}

/// The counts of one rank's traffic: kept by [`super::EndpointState`],
/// advanced by the provided [`super::Transport`] calls of every
/// [`super::Endpoint`] (the counting of every transport, in one place).
#[derive(Debug, Clone, Default)]
pub struct TrafficCounter {
    traffic: Traffic,
}

impl TrafficCounter {
    /// A message of `len` bytes was sent.
    pub fn sent(&mut self, len: usize) {
        self.traffic.bytes_sent += len as u64;
        self.traffic.msgs_sent += 1;
    }
    /// A message of `len` bytes was received.
    pub fn received(&mut self, len: usize) {
        self.traffic.bytes_recv += len as u64;
        self.traffic.msgs_recv += 1;
    }
    /// One round began.
    pub fn round(&mut self) {
        self.traffic.rounds += 1;
    }
    /// The totals so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }
}

//! The queue between the WebSocket and the model: messages as they arrived, applied in order a
//! slice of time at a time.
//!
//! A protocol-5 batch holds up to 256 messages (1 MiB), and when the page falls behind, the
//! server sends every batch full. Applied in the WebSocket's own event, one batch is one
//! main-thread task of 50 ms or more, and nothing is drawn meanwhile. Queued here instead, the
//! page applies messages until its time slice is spent, yields (so that input and drawing go
//! first), and goes on where it stopped; arrival order is kept, batch boundaries do not matter.
//! The queue holds what the browser would otherwise hold unread; [`IntakeQueue::queued_bytes`]
//! says how far behind the page is. It is bounded (`?intake=`, 256 MiB): past the bound a
//! message is dropped unread and counted, and its frames then count as lost (seq gaps) where
//! they were due, so the page never shows as complete what it did not read.

use std::collections::VecDeque;
use std::ops::Range;

use kvscope_protocol::{self as proto, ProtocolError};

/// One WebSocket message, split into the protocol messages it carries.
#[derive(Debug)]
enum Queued {
    Messages {
        bytes: Vec<u8>,
        ranges: Vec<Range<usize>>,
        next: usize,
    },
    /// A message that is not a valid batch: counted when its turn comes, in arrival order.
    Error(ProtocolError),
}

/// What [`IntakeQueue::pop`] hands out.
#[derive(Debug)]
pub enum Next<'a> {
    Message(&'a [u8]),
    Error(ProtocolError),
}

#[derive(Debug, Default)]
pub struct IntakeQueue {
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    queued_messages: usize,
    /// 0: unbounded.
    bound_bytes: usize,
    dropped_messages: u64,
    dropped_bytes: u64,
}

/// How far behind the page is, for the fleet bar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntakeStatus {
    pub queued_bytes: usize,
    pub queued_messages: usize,
    pub bound_bytes: usize,
    /// WebSocket messages dropped unread because the queue was at its bound, and their bytes.
    pub dropped_messages: u64,
    pub dropped_bytes: u64,
}

impl IntakeQueue {
    pub fn with_bound(bound_bytes: usize) -> Self {
        IntakeQueue { bound_bytes, ..Default::default() }
    }

    pub fn set_bound(&mut self, bound_bytes: usize) {
        self.bound_bytes = bound_bytes;
    }

    pub fn status(&self) -> IntakeStatus {
        IntakeStatus {
            queued_bytes: self.queued_bytes,
            queued_messages: self.queued_messages,
            bound_bytes: self.bound_bytes,
            dropped_messages: self.dropped_messages,
            dropped_bytes: self.dropped_bytes,
        }
    }

    /// Queues one WebSocket message (a lone message or a batch of them); past the bound it is
    /// dropped and counted instead (never when nothing is queued, so one large message still
    /// goes through).
    pub fn push(&mut self, bytes: Vec<u8>) {
        if self.bound_bytes > 0 && self.queued_bytes > 0 && self.queued_bytes + bytes.len() > self.bound_bytes {
            self.dropped_messages += 1;
            self.dropped_bytes += bytes.len() as u64;
            return;
        }
        let base = bytes.as_ptr() as usize;
        let ranges: Result<Vec<Range<usize>>, ProtocolError> = proto::unbatch(&bytes).map(|messages| {
            messages
                .into_iter()
                .map(|m| {
                    let start = m.as_ptr() as usize - base;
                    start..start + m.len()
                })
                .collect()
        });
        match ranges {
            Ok(ranges) => {
                self.queued_bytes += bytes.len();
                self.queued_messages += ranges.len();
                self.queue.push_back(Queued::Messages { bytes, ranges, next: 0 });
            }
            Err(e) => self.queue.push_back(Queued::Error(e)),
        }
    }

    /// The oldest message not yet applied.
    pub fn pop(&mut self) -> Option<Next<'_>> {
        // Drop what is spent first, so that the borrow handed out below is the only one.
        while let Some(front) = self.queue.front() {
            match front {
                Queued::Messages { ranges, next, .. } if *next >= ranges.len() => {
                    if let Some(Queued::Messages { bytes, .. }) = self.queue.pop_front() {
                        self.queued_bytes -= bytes.len();
                    }
                }
                _ => break,
            }
        }
        if matches!(self.queue.front()?, Queued::Error(_)) {
            return match self.queue.pop_front() {
                Some(Queued::Error(e)) => Some(Next::Error(e)),
                _ => None,
            };
        }
        match self.queue.front_mut()? {
            Queued::Messages { bytes, ranges, next } => {
                let range = ranges[*next].clone();
                *next += 1;
                self.queued_messages -= 1;
                Some(Next::Message(&bytes[range]))
            }
            Queued::Error(_) => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queued_messages == 0 && !self.queue.iter().any(|q| matches!(q, Queued::Error(_)))
    }

    /// Bytes received and not yet applied (whole WebSocket messages, until their last part is).
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Protocol messages received and not yet applied.
    pub fn queued_messages(&self) -> usize {
        self.queued_messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvscope_protocol::{HistoryStart, Message, encode, encode_batch};

    /// A small message that says which it is.
    fn message(n: u64) -> Message {
        Message::HistoryStart(HistoryStart { frames: n, bytes: 0 })
    }

    fn encoded(n: u64) -> Vec<u8> {
        encode(&message(n))
    }

    #[test]
    fn messages_come_out_in_arrival_order_whatever_the_batches() {
        let mut q = IntakeQueue::default();
        q.push(encoded(1));
        q.push(encode_batch(&[encoded(2), encoded(3), encoded(4)]));
        q.push(b"\xff not a message".to_vec());
        q.push(encode_batch(&[encoded(5)]));
        assert_eq!(q.queued_messages(), 5);
        let mut seen = Vec::new();
        while let Some(next) = q.pop() {
            seen.push(match next {
                Next::Message(m) => format!("{:?}", proto::decode(m).unwrap()),
                Next::Error(_) => "error".to_owned(),
            });
        }
        let want: Vec<String> = [1, 2, 3, 4].iter().map(|&n| format!("{:?}", message(n))).collect();
        assert_eq!(seen[..4], want[..]);
        assert_eq!(seen[4], "error", "a bad message is reported in its place");
        assert_eq!(seen[5], format!("{:?}", message(5)));
        assert!(q.is_empty());
        assert_eq!((q.queued_bytes(), q.queued_messages()), (0, 0));
    }

    #[test]
    fn past_its_bound_the_queue_drops_whole_messages_and_counts_them() {
        let one = encoded(1);
        let mut q = IntakeQueue::with_bound(2 * one.len());
        for n in 0..5 {
            q.push(encoded(n));
        }
        let s = q.status();
        assert_eq!((s.queued_messages, s.dropped_messages, s.dropped_bytes), (2, 3, 3 * one.len() as u64));
        while q.pop().is_some() {}
        // Drained, it takes messages again, and a message larger than the bound when nothing is queued.
        q.push(vec![0; 10 * one.len()]);
        assert_eq!(q.status().dropped_messages, 3);
        assert!(matches!(q.pop(), Some(Next::Error(_))), "not a protocol message, but it was not dropped");
    }

    #[test]
    fn a_batch_is_held_until_its_last_message_is_applied() {
        let mut q = IntakeQueue::default();
        let batch = encode_batch(&[encoded(1), encoded(2)]);
        let len = batch.len();
        q.push(batch);
        assert!(matches!(q.pop(), Some(Next::Message(_))));
        assert_eq!((q.queued_bytes(), q.queued_messages()), (len, 1));
        assert!(!q.is_empty());
        assert!(matches!(q.pop(), Some(Next::Message(_))));
        assert!(q.pop().is_none());
        assert_eq!(q.queued_bytes(), 0);
    }
}

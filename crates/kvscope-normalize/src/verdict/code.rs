//! The compact code of a verdict (`offload_block_size_mismatch host_pinned`), for tests, the
//! vector table and the JS API.

use std::fmt;

use super::{Apply, Verdict, VerdictKind};
use crate::label::VerdictLabel;

/// See [`Verdict::code`].
#[derive(Debug, Clone, Copy)]
pub struct VerdictCode<'a>(pub(super) &'a Verdict);

impl fmt::Display for VerdictCode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let label = v.label();
        f.write_str(label.as_str())?;
        if let Some(tier) = v.tier {
            write!(f, " {}", tier.label())?;
        }
        if let VerdictKind::Apply(Apply::Store { blocks } | Apply::Remove { blocks }) = v.kind {
            write!(f, " {blocks}")?;
        }
        for name in v.flags.names() {
            // The label already says it.
            if label == VerdictLabel::SelfReferencingStore && name == "self_referencing_store" {
                continue;
            }
            write!(f, " +{name}")?;
        }
        Ok(())
    }
}

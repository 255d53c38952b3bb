//! Checks of `[rope]` and `[compressed_rope]`: convention, theta, YaRN or explicit factors.

use super::check::Check;
use super::schema::*;
use crate::error::ConfigError;
use crate::rope::{RopeConvention, RopeScaling, RopeSpec, POSITION_MAX};

impl Check<'_> {
    pub(super) fn rope(
        &self,
        r: RawRope,
        section: &str,
        rope_dim: u32,
    ) -> Result<RopeSpec, ConfigError> {
        let key = |k: &str| format!("{section}.{k}");
        let convention = match self.required(r.convention, &key("convention"))?.as_str() {
            "interleaved" => RopeConvention::Interleaved,
            "half_split" => RopeConvention::HalfSplit,
            other => {
                return Err(self.err(
                    key("convention"),
                    format!("unknown convention `{other}` (expected interleaved or half_split)"),
                ))
            }
        };
        let theta = self.required(r.theta, &key("theta"))?;
        if !(theta.is_finite() && theta > 1.0) {
            return Err(self.err(
                key("theta"),
                format!("must be a finite number greater than 1, found {theta}"),
            ));
        }
        let scaling = match (r.yarn, r.factors) {
            (Some(_), Some(_)) => {
                return Err(self.err(
                    key("factors"),
                    format!(
                    "a RoPE has one scaling: give {section}.yarn or {section}.factors, not both"
                ),
                ))
            }
            (None, None) => RopeScaling::None,
            (None, Some(factors)) => {
                let expected = (rope_dim / 2) as usize;
                if factors.len() != expected {
                    return Err(self.err(
                        key("factors"),
                        format!("expected {expected} factors (one per pair: rope_dim {rope_dim} / 2), found {}", factors.len()),
                    ));
                }
                if let Some((i, f)) = factors
                    .iter()
                    .enumerate()
                    .find(|(_, f)| !(f.is_finite() && **f > 0.0))
                {
                    return Err(self.err(
                        format!("{section}.factors[{i}]"),
                        format!("must be a finite number greater than 0, found {f}"),
                    ));
                }
                RopeScaling::Factors(factors)
            }
            (Some(y), None) => self.yarn(y, &key("yarn"))?,
        };
        Ok(RopeSpec {
            convention,
            theta,
            scaling,
        })
    }

    pub(super) fn yarn(&self, y: RawYarn, section: &str) -> Result<RopeScaling, ConfigError> {
        let positive = |v: Option<f64>, k: &str| -> Result<f64, ConfigError> {
            let key = format!("{section}.{k}");
            let v = self.required(v, &key)?;
            if !(v.is_finite() && v > 0.0) {
                return Err(self.err(
                    key,
                    format!("must be a finite number greater than 0, found {v}"),
                ));
            }
            Ok(v)
        };
        let factor = positive(y.factor, "factor")?;
        let key = format!("{section}.original_max_position");
        let original_max_position = self.required(y.original_max_position, &key)?;
        if original_max_position == 0 || original_max_position > POSITION_MAX {
            return Err(self.err(
                key,
                format!("must be in 1..={POSITION_MAX}, found {original_max_position}"),
            ));
        }
        let beta_fast = positive(y.beta_fast, "beta_fast")?;
        let beta_slow = positive(y.beta_slow, "beta_slow")?;
        if beta_fast < beta_slow {
            return Err(self.err(
                format!("{section}.beta_fast"),
                format!("must be at least beta_slow ({beta_slow}), found {beta_fast}"),
            ));
        }
        Ok(RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
        })
    }
}

//! Checks of `[rope]` and `[compressed_rope]`: convention, theta, and at most one scaling
//! (`yarn` or `longrope`) with the model's own values.

use super::check::Check;
use super::schema::*;
use crate::error::ConfigError;
use crate::rope::{LongRope, RopeConvention, RopeScaling, RopeSpec, Yarn, POSITION_MAX};

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
        if r.factors.is_some() {
            return Err(self.err(
                key("factors"),
                format!(
                    "replaced by [{section}.longrope]: give the model's short_factors, \
                     long_factors, original_max_position and max_position (LongRoPE picks a \
                     set by sequence length)"
                ),
            ));
        }
        let scaling = match (r.yarn, r.longrope) {
            (Some(_), Some(_)) => {
                return Err(self.err(
                    key("longrope"),
                    format!(
                    "a RoPE has one scaling: give {section}.yarn or {section}.longrope, not both"
                ),
                ))
            }
            (None, None) => RopeScaling::None,
            (Some(y), None) => RopeScaling::Yarn(self.yarn(y, &key("yarn"))?),
            (None, Some(l)) => {
                RopeScaling::LongRope(self.longrope(l, &key("longrope"), rope_dim)?)
            }
        };
        Ok(RopeSpec {
            convention,
            theta,
            scaling,
        })
    }

    /// A finite number greater than 0.
    fn positive(&self, v: f64, key: String) -> Result<f64, ConfigError> {
        if !(v.is_finite() && v > 0.0) {
            return Err(self.err(
                key,
                format!("must be a finite number greater than 0, found {v}"),
            ));
        }
        Ok(v)
    }

    /// A context length in `1..=POSITION_MAX`.
    fn context(&self, v: Option<u64>, key: String) -> Result<u64, ConfigError> {
        let v = self.required(v, &key)?;
        if v == 0 || v > POSITION_MAX {
            return Err(self.err(key, format!("must be in 1..={POSITION_MAX}, found {v}")));
        }
        Ok(v)
    }

    fn yarn(&self, y: RawYarn, section: &str) -> Result<Yarn, ConfigError> {
        let key = |k: &str| format!("{section}.{k}");
        let positive = |v: Option<f64>, k: &str| -> Result<f64, ConfigError> {
            self.positive(self.required(v, &key(k))?, key(k))
        };
        let factor = positive(y.factor, "factor")?;
        let original_max_position =
            self.context(y.original_max_position, key("original_max_position"))?;
        let beta_fast = positive(y.beta_fast, "beta_fast")?;
        let beta_slow = positive(y.beta_slow, "beta_slow")?;
        if beta_fast < beta_slow {
            return Err(self.err(
                key("beta_fast"),
                format!("must be at least beta_slow ({beta_slow}), found {beta_fast}"),
            ));
        }
        let (mscale, mscale_all_dim) = match (y.mscale, y.mscale_all_dim) {
            (Some(m), Some(a)) => (
                Some(self.positive(m, key("mscale"))?),
                Some(self.positive(a, key("mscale_all_dim"))?),
            ),
            (None, None) => (None, None),
            (Some(_), None) | (None, Some(_)) => {
                return Err(self.err(
                    key(if y.mscale.is_some() {
                        "mscale_all_dim"
                    } else {
                        "mscale"
                    }),
                    "give mscale and mscale_all_dim together (the attention factor is their \
                     ratio) or neither (then it is 0.1 ln(factor) + 1)",
                ))
            }
        };
        let attention_factor = y
            .attention_factor
            .map(|a| self.positive(a, key("attention_factor")))
            .transpose()?;
        Ok(Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            attention_factor,
        })
    }

    fn longrope(
        &self,
        l: RawLongRope,
        section: &str,
        rope_dim: u32,
    ) -> Result<LongRope, ConfigError> {
        let key = |k: &str| format!("{section}.{k}");
        let original_max_position =
            self.context(l.original_max_position, key("original_max_position"))?;
        let max_position = self.context(l.max_position, key("max_position"))?;
        let factors = |v: Option<Vec<f64>>, k: &str| -> Result<Vec<f64>, ConfigError> {
            let v = self.required(v, &key(k))?;
            let expected = (rope_dim / 2) as usize;
            if v.len() != expected {
                return Err(self.err(
                    key(k),
                    format!(
                        "expected {expected} factors (one per pair: rope_dim {rope_dim} / 2), found {}",
                        v.len()
                    ),
                ));
            }
            for (i, f) in v.iter().enumerate() {
                self.positive(*f, format!("{section}.{k}[{i}]"))?;
            }
            Ok(v)
        };
        let short_factors = factors(l.short_factors, "short_factors")?;
        let long_factors = factors(l.long_factors, "long_factors")?;
        let attention_factor = l
            .attention_factor
            .map(|a| self.positive(a, key("attention_factor")))
            .transpose()?;
        Ok(LongRope {
            original_max_position,
            max_position,
            short_factors,
            long_factors,
            attention_factor,
        })
    }
}

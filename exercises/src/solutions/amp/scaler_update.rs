use super::ScaleState;
use brrr_backend::ScaleUpdateParams;

/// The rule, case by case.
pub fn update(mut s: ScaleState, found_inf: bool, p: &ScaleUpdateParams) -> ScaleState {
    if found_inf {
        s.clean = 0;
        s.overflows = s.overflows.saturating_add(1);
        if s.overflows as u32 >= p.hysteresis {
            s.scale = (s.scale * p.backoff_factor).max(p.min_scale);
        }
    } else {
        s.clean += 1;
        if s.clean as u32 == p.growth_interval {
            let grown = s.scale * p.growth_factor;
            if grown.is_finite() {
                s.scale = grown;
            }
            s.clean = 0;
            s.overflows = 0;
        }
    }
    s
}

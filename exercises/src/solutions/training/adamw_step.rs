use brrr_backend::AdamWParams;

/// Moments, bias correction, then the decoupled decay, element by element
/// (bias corrections in f64, as `beta^t` needs).
pub fn adamw_step(hp: &AdamWParams, param: &mut [f32], grad: &[f32], m: &mut [f32], v: &mut [f32]) {
    let t = f64::from(hp.step);
    let bc1 = (1.0 - f64::from(hp.beta1).powf(t)) as f32;
    let bc2 = (1.0 - f64::from(hp.beta2).powf(t)) as f32;
    for i in 0..param.len() {
        let g = grad[i] * hp.grad_scale;
        m[i] = hp.beta1 * m[i] + (1.0 - hp.beta1) * g;
        v[i] = hp.beta2 * v[i] + (1.0 - hp.beta2) * g * g;
        let (mhat, vhat) = (m[i] / bc1, v[i] / bc2);
        param[i] -= hp.lr * (mhat / (vhat.sqrt() + hp.eps) + hp.weight_decay * param[i]);
    }
}

//! The two option namespaces of ONNX Runtime's plugin-EP design, reduced to bare `arena.*`
//! pairs: environment level `ep_factory.<FactoryName>.arena.*` (factory name matched
//! case-sensitively) and session level `ep.<lowercased ep name>.arena.*`.

/// The `arena.*` pairs addressed to factory `factory_name` at environment level, prefix
/// stripped, in input order. Other keys are left out.
pub fn env_arena_options<K: AsRef<str>, V: AsRef<str>>(
    pairs: impl IntoIterator<Item = (K, V)>,
    factory_name: &str,
) -> Vec<(String, String)> {
    strip(pairs, &format!("ep_factory.{factory_name}."))
}

/// The `arena.*` pairs addressed to execution provider `ep_name` at session level (the
/// name is lowercased, as ORT does), prefix stripped, in input order.
pub fn session_arena_options<K: AsRef<str>, V: AsRef<str>>(
    pairs: impl IntoIterator<Item = (K, V)>,
    ep_name: &str,
) -> Vec<(String, String)> {
    strip(pairs, &format!("ep.{}.", ep_name.to_lowercase()))
}

fn strip<K: AsRef<str>, V: AsRef<str>>(
    pairs: impl IntoIterator<Item = (K, V)>,
    prefix: &str,
) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .filter_map(|(k, v)| {
            let rest = k.as_ref().strip_prefix(prefix)?;
            rest.starts_with("arena.")
                .then(|| (rest.to_string(), v.as_ref().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_keys_are_matched_by_exact_factory_name() {
        let pairs = [
            ("ep_factory.CudaEP.arena.max_mem", "1024"),
            ("ep_factory.cudaep.arena.max_mem", "2048"),
            ("ep_factory.CudaEP.other", "x"),
            ("arena.max_mem", "4096"),
        ];
        assert_eq!(
            env_arena_options(pairs, "CudaEP"),
            vec![("arena.max_mem".to_string(), "1024".to_string())]
        );
    }

    #[test]
    fn session_keys_use_the_lowercased_ep_name() {
        let pairs = [
            ("ep.cudaexecutionprovider.arena.extend_strategy", "1"),
            ("ep.CUDAExecutionProvider.arena.max_mem", "1"),
        ];
        assert_eq!(
            session_arena_options(pairs, "CUDAExecutionProvider"),
            vec![("arena.extend_strategy".to_string(), "1".to_string())]
        );
    }
}

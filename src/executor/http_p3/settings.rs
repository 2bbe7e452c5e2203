//! The WASI 0.3 HTTP backend's own settings and flags: whether it runs at all, and how many activations one instance takes at once.

use std::time::Duration;

use crate::config::{Backends, Config, Protocol};

/// What `wasmtime serve` and Spin 4 let one p3 instance take at once.
pub const DEFAULT_ACTIVATIONS_AT_ONCE: usize = 16;

/// The http-p3 backend's settings.
#[derive(Debug, Clone)]
pub struct P3Settings {
    /// Whether WASI 0.3 components run (`--wasip3`): off unless an operator turns it on.
    pub enabled: bool,
    /// Activations one instance takes at once, where sharing is allowed (`Sharing`).
    pub at_once: usize,
    /// An instance with nothing to do for this long is dropped (none: kept, as every
    /// backend's instances are).
    pub idle_timeout: Option<Duration>,
}

impl Default for P3Settings {
    fn default() -> Self {
        P3Settings {
            enabled: false,
            at_once: DEFAULT_ACTIVATIONS_AT_ONCE,
            idle_timeout: None,
        }
    }
}

impl P3Settings {
    pub fn of(config: &Config) -> P3Settings {
        config.backends.get::<P3Settings>().cloned().unwrap_or_default()
    }

    /// How many activations one instance takes at once under `config`: under OpenWhisk's
    /// protocol only when the container allows concurrent activations
    /// (`__OW_ALLOW_CONCURRENT=true`, which the platform sets for actions whose
    /// `limits.concurrency` is above 1), one at a time otherwise; under plain HTTP as many
    /// as `--wasip3-activations-at-once`; never more than one where each instance serves
    /// one activation (`--max-activations-per-instance 1`).
    pub fn at_once(&self, config: &Config) -> usize {
        if config.pool.max_activations_per_instance == 1 {
            return 1;
        }
        let allowed = match config.protocol {
            Protocol::Http => true,
            Protocol::OpenWhisk => config
                .action
                .inherited_env
                .iter()
                .any(|(key, value)| key == "__OW_ALLOW_CONCURRENT" && value == "true"),
        };
        if allowed { self.at_once.max(1) } else { 1 }
    }
}

impl crate::config::BackendSettings for P3Settings {}

/// The http-p3 backend's flags, on `serve` and `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct P3Args {
    /// Run WASI 0.3 HTTP components (`wasi:http/service@0.3.0`, what Spin 4 and `wasmtime
    /// serve` build by default). Experimental in wasmtime 48: fixes that concern only WASI
    /// 0.3, security fixes among them, get no 48.x patch release. Turn it on knowingly.
    #[arg(long, env = "WASMLOOP_WASIP3")]
    pub wasip3: bool,
    /// Activations one WASI 0.3 instance takes at once, when sharing is allowed (plain
    /// HTTP; OpenWhisk with __OW_ALLOW_CONCURRENT=true). Instances are counted apart (by
    /// `serve`'s concurrency).
    #[arg(long, env = "WASMLOOP_WASIP3_ACTIVATIONS_AT_ONCE", value_name = "N",
          default_value_t = DEFAULT_ACTIVATIONS_AT_ONCE as u16,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub wasip3_activations_at_once: u16,
    /// Drop a WASI 0.3 instance idle this long (`wasmtime serve` drops them after 1s);
    /// unset, they are kept as every backend's instances are.
    #[arg(long, env = "WASMLOOP_WASIP3_IDLE_TIMEOUT", value_name = "DURATION",
          value_parser = humantime::parse_duration)]
    pub wasip3_idle_timeout: Option<Duration>,
}

/// Declares them and reads them into `P3Settings`.
pub const FLAGS: crate::executor::registry::Flags = crate::executor::registry::Flags {
    declare: <P3Args as clap::Args>::augment_args,
    read: |matches, backends: &mut Backends, _| {
        let args = <P3Args as clap::FromArgMatches>::from_arg_matches(matches)?;
        let settings = backends.get_mut::<P3Settings>();
        settings.enabled = args.wasip3;
        settings.at_once = usize::from(args.wasip3_activations_at_once);
        settings.idle_timeout = args.wasip3_idle_timeout;
        Ok(())
    },
};

/// What a WASI 0.3 component gets without `--wasip3`.
pub const DISABLED: &str = "this is a WASI 0.3 HTTP component (it exports \
     wasi:http/handler@0.3), which this runtime runs only when started with --wasip3 \
     (WASMLOOP_WASIP3=true). WASI 0.3 is experimental in wasmtime 48: fixes that concern only \
     it, security fixes among them, get no 48.x patch release, so an operator turns it on \
     knowingly. Or build the action for WASI 0.2 (wasmloop new rust-http)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_shared_only_where_the_platform_or_the_protocol_allows_it() {
        let settings = P3Settings {
            at_once: 8,
            ..P3Settings::default()
        };
        let mut config = Config::default();
        assert_eq!(settings.at_once(&config), 1, "OpenWhisk without the platform's consent");
        config.action.inherited_env = vec![("__OW_ALLOW_CONCURRENT".into(), "false".into())];
        assert_eq!(settings.at_once(&config), 1);
        config.action.inherited_env = vec![("__OW_ALLOW_CONCURRENT".into(), "true".into())];
        assert_eq!(settings.at_once(&config), 8);
        let mut http = Config {
            protocol: Protocol::Http,
            ..Config::default()
        };
        assert_eq!(settings.at_once(&http), 8);
        http.pool.max_activations_per_instance = 1;
        assert_eq!(settings.at_once(&http), 1, "one activation per instance shares none");
    }
}

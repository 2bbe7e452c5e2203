//! The native backend's own settings and flags: how long a child without an ack must live to count as started.

use std::time::Duration;

use crate::config::Backends;

/// How long a child without an ack must stay alive to count as started. The reference
/// waits 5 ms; spawn errors are reported at once anyway, so this only catches children that
/// die straight away, and 2 ms does that while keeping a native /init shorter than the
/// reference's wait alone.
pub const DEFAULT_START_PROBE: &str = "2ms";

/// The native backend's settings.
#[derive(Debug, Clone)]
pub struct NativeSettings {
    pub start_probe: Duration,
}

impl Default for NativeSettings {
    fn default() -> Self {
        NativeSettings {
            start_probe: crate::config::duration(DEFAULT_START_PROBE),
        }
    }
}

impl crate::config::BackendSettings for NativeSettings {}

/// The native backend's flags, on `serve` and `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct NativeArgs {
    /// How long a native action without ack must stay alive after spawning to count as
    /// started; after that, it has started once it reads its stdin (or after 1 s alive).
    #[arg(long, env = "WASMLOOP_START_PROBE", value_parser = humantime::parse_duration,
          default_value = DEFAULT_START_PROBE)]
    pub start_probe: Duration,
}

/// Declares them and reads them into `NativeSettings`.
pub const FLAGS: super::super::registry::Flags = super::super::registry::Flags {
    declare: <NativeArgs as clap::Args>::augment_args,
    read: |matches, backends: &mut Backends, _| {
        let args = <NativeArgs as clap::FromArgMatches>::from_arg_matches(matches)?;
        backends.get_mut::<NativeSettings>().start_probe = args.start_probe;
        Ok(())
    },
};

//! `distlock doctor`: what the server (or the proxy in front of it) does with each command the
//! library may use, and so which lock kinds, primitives, notification modes and guarantees work
//! there ([`distlock::redis::RedisBackendBuilder::probe`]).

use std::process::ExitCode;

use distlock::redis::{Capabilities, Standing, Support};
use serde_json::json;

use crate::connection::ConnectionArgs;
use crate::exit;

/// `distlock doctor [--json]`
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// One JSON object (`server`, `capabilities`, `features`, `default_lock_works`) instead of
    /// text.
    #[arg(long)]
    json: bool,
}

/// Runs `distlock doctor`: exit status 0 when the default lock works on the server, 69 when it
/// does not (or the server cannot be reached), 2 for bad flags.
pub async fn doctor(connection: &ConnectionArgs, args: DoctorArgs) -> ExitCode {
    let probed = match connection.builder() {
        Ok(builder) => builder.probe().await,
        Err(error) => Err(error),
    };
    let capabilities = match probed {
        Ok(capabilities) => capabilities,
        Err(error) => return crate::cannot_connect(&error),
    };
    if args.json {
        println!("{}", as_json(&capabilities));
    } else {
        print!("{}", as_text(&capabilities));
    }
    if capabilities.default_lock_works() {
        ExitCode::SUCCESS
    } else {
        exit::code(exit::BACKEND_ERROR)
    }
}

/// The capability table, then the features, as text.
fn as_text(capabilities: &Capabilities) -> String {
    let mut text = String::new();
    match capabilities.server() {
        Some(server) => text.push_str(&format!(
            "server: {} {} ({})\n",
            server.name, server.version, server.mode
        )),
        None => text.push_str("server: did not say (no HELLO)\n"),
    }
    text.push_str("\ncommands:\n");
    for (capability, support) in capabilities.iter() {
        let mark = if support.is_yes() { "ok " } else { "-- " };
        text.push_str(&format!("  {mark}{:<20} {support}\n", capability.command()));
    }
    text.push_str("\nfeatures:\n");
    for feature in capabilities.features() {
        text.push_str(&format!(
            "  {:<11} {}: {}\n",
            feature.standing.to_string(),
            feature.name,
            feature.reason
        ));
    }
    text.push_str(if capabilities.default_lock_works() {
        "\nthe default lock works here\n"
    } else if capabilities.runs_fast_lock_without_scripts() {
        "\nthe default lock does NOT work here; the fast lock (LockKind::Fast) does, without scripts\n"
    } else {
        "\nthe default lock does NOT work here\n"
    });
    text
}

fn support_word(support: &Support) -> &'static str {
    match support {
        Support::Yes => "yes",
        Support::NotPermitted(_) => "not_permitted",
        Support::Unknown(_) => "unknown",
        Support::ClosesConnection => "closes_connection",
        Support::NoAnswer => "no_answer",
        Support::NotProbed => "not_probed",
        _ => "failed",
    }
}

fn standing_word(standing: Standing) -> &'static str {
    match standing {
        Standing::Works => "works",
        Standing::Degraded => "degraded",
        _ => "unavailable",
    }
}

/// The same as one JSON object.
fn as_json(capabilities: &Capabilities) -> serde_json::Value {
    let commands: Vec<_> = capabilities
        .iter()
        .map(|(capability, support)| {
            json!({
                "command": capability.command(),
                "support": support_word(support),
                "detail": support.to_string(),
                "used_for": capability.used_for(),
            })
        })
        .collect();
    let features: Vec<_> = capabilities
        .features()
        .into_iter()
        .map(|feature| {
            json!({
                "feature": feature.name,
                "standing": standing_word(feature.standing),
                "reason": feature.reason,
            })
        })
        .collect();
    json!({
        "server": capabilities.server().map(|server| json!({
            "name": server.name,
            "version": server.version,
            "mode": server.mode,
        })),
        "capabilities": commands,
        "features": features,
        "default_lock_works": capabilities.default_lock_works(),
    })
}

//! `-o json|yaml`.

use serde_json::Value;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
}

pub fn render(value: &Value, output: Output) -> anyhow::Result<String> {
    Ok(match output {
        Output::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
        Output::Yaml => serde_yaml::to_string(value)?,
    })
}

pub fn print_value(value: &Value, output: Output) -> anyhow::Result<()> {
    print!("{}", render(value, output)?);
    Ok(())
}

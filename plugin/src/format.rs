//! `-o`'s value: one of a command's formats (a clap value enum), or
//! kubectl's `jsonpath=TEMPLATE`. A leaf: the argument structs use it,
//! [`crate::jsonpath`] renders the template.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::ValueEnum;

/// `-o`: one of a command's formats, or kubectl's `jsonpath=TEMPLATE`
/// (`jsonpath-file=FILE`: the template in a file), which renders the
/// command's json output through the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format<T> {
    Named(T),
    JsonPath(String),
}

/// A format set with a json member, which `jsonpath=` renders from.
pub trait WithJson: Copy {
    const JSON: Self;
}

impl<T: WithJson> Format<T> {
    /// The format the command prints in: json under a template.
    pub fn get(&self) -> T {
        match self {
            Format::Named(t) => *t,
            Format::JsonPath(_) => T::JSON,
        }
    }

    /// The `jsonpath=` template, if that is the format.
    pub fn template(&self) -> Option<&str> {
        match self {
            Format::Named(_) => None,
            Format::JsonPath(t) => Some(t),
        }
    }
}

/// Parses `-o` into a [`Format`]: `T`'s values as clap's value enums
/// take them, or `jsonpath=`/`jsonpath-file=`.
#[derive(Clone)]
pub struct FormatParser<T>(std::marker::PhantomData<T>);

impl<T> FormatParser<T> {
    pub fn new() -> Self {
        FormatParser(std::marker::PhantomData)
    }
}

impl<T> Default for FormatParser<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: ValueEnum + Clone + Send + Sync + 'static> TypedValueParser for FormatParser<T> {
    type Value = Format<T>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Format<T>, clap::Error> {
        let text = value.to_string_lossy();
        if let Some(t) = text.strip_prefix("jsonpath=") {
            return Ok(Format::JsonPath(t.to_string()));
        }
        if let Some(f) = text.strip_prefix("jsonpath-file=") {
            return std::fs::read_to_string(f)
                .map(|t| Format::JsonPath(t.trim_end_matches('\n').to_string()))
                .map_err(|e| {
                    clap::Error::raw(
                        clap::error::ErrorKind::InvalidValue,
                        format!("cannot read -o jsonpath-file={f}: {e}\n"),
                    )
                    .with_cmd(cmd)
                });
        }
        let named = PossibleValuesParser::new(Self::named()).parse_ref(cmd, arg, value)?;
        T::from_str(&named, true)
            .map(Format::Named)
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Self::named().into_iter()))
    }
}

impl<T: ValueEnum> FormatParser<T> {
    /// `T`'s values, then `jsonpath=`.
    fn named() -> Vec<PossibleValue> {
        let jsonpath = PossibleValue::new("jsonpath=")
            .help("kubectl's JSONPath template over the json output, e.g. jsonpath='{.items[*].metadata.name}'");
        T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value())
            .chain([jsonpath])
            .collect()
    }
}

//! OpenMetrics text for the helper processes (`kvfabric router`, `kvfabric engine-sim`), whose
//! few counters and gauges are plain atomics: one writer of families and samples, so both
//! print the same format (`# HELP`/`# TYPE` per family, `_total` on counter samples, `# EOF`).
//! The node itself exposes a `prometheus-client` registry (`http/metrics.rs`).

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A counter (its samples end in `_total`).
    Counter,
    /// A gauge.
    Gauge,
}

/// The text being written.
#[derive(Debug, Default)]
pub struct MetricsText {
    out: String,
}

impl MetricsText {
    /// Starts family `family`: its help line and type.
    pub fn family(&mut self, family: &str, kind: Kind, help: &str) {
        let t = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        self.out
            .push_str(&format!("# HELP {family} {help}\n# TYPE {family} {t}\n"));
    }

    /// One sample of `family` with `labels` (a counter's sample is named `<family>_total`).
    pub fn sample(&mut self, family: &str, kind: Kind, labels: &[(&str, &str)], v: u64) {
        let suffix = if kind == Kind::Counter { "_total" } else { "" };
        let labels = if labels.is_empty() {
            String::new()
        } else {
            let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            format!("{{{}}}", inner.join(","))
        };
        self.out
            .push_str(&format!("{family}{suffix}{labels} {v}\n"));
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, family: &str, kind: Kind, help: &str, v: u64) {
        self.family(family, kind, help);
        self.sample(family, kind, &[], v);
    }

    /// The text, terminated by `# EOF`.
    pub fn finish(mut self) -> String {
        self.out.push_str("# EOF\n");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_eof() {
        let mut m = MetricsText::default();
        m.single("x_requests", Kind::Counter, "requests", 3);
        m.family("x_load", Kind::Gauge, "load");
        m.sample("x_load", Kind::Gauge, &[("backend", "n1")], 2);
        assert_eq!(
            m.finish(),
            "# HELP x_requests requests\n# TYPE x_requests counter\nx_requests_total 3\n\
             # HELP x_load load\n# TYPE x_load gauge\nx_load{backend=\"n1\"} 2\n# EOF\n"
        );
    }
}

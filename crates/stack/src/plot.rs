//! Line charts as standalone SVG: the monitor's latency and memory over
//! time. Our own few lines instead of a plotting dependency: axes with
//! rounded ticks, one polyline per series (gaps where a value is missing),
//! a legend, text escaped for XML.

use std::fmt::Write;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_RIGHT: f64 = 190.0;
const MARGIN_TOP: f64 = 40.0;
const MARGIN_BOTTOM: f64 = 50.0;
/// Ticks drawn on an axis, about.
const TICKS: usize = 6;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One line: a name and (x, y) points; `None` y leaves a gap.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, Option<f64>)>,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// Escapes text for XML content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A "nice" step (1, 2 or 5 times a power of ten) giving about `n` ticks
/// over `span`.
pub fn nice_step(span: f64, n: usize) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    let s = format!("{v:.decimals$}");
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

impl Chart {
    /// Renders the chart as a complete SVG document.
    pub fn to_svg(&self) -> String {
        let pts = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter_map(|&(x, y)| y.filter(|y| y.is_finite() && x.is_finite()).map(|y| (x, y)));
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, f64::MIN);
        for (x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1, y1) = (0.0, 1.0, 1.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if y1 <= y0 {
            y1 = y0 + 1.0;
        }
        let ystep = nice_step(y1 - y0, TICKS);
        let y1 = (y1 / ystep).ceil() * ystep;
        let y0 = (y0 / ystep).floor() * ystep;
        let xstep = nice_step(x1 - x0, TICKS);
        let pw = WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
        let ph = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM;
        let sx = |x: f64| MARGIN_LEFT + (x - x0) / (x1 - x0) * pw;
        let sy = |y: f64| MARGIN_TOP + ph - (y - y0) / (y1 - y0) * ph;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
            MARGIN_LEFT + pw / 2.0,
            escape(&self.title)
        );
        // Grid and tick labels.
        let mut y = y0;
        while y <= y1 + ystep * 1e-9 {
            let py = sy(y);
            let _ = writeln!(
                s,
                r##"<line x1="{MARGIN_LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                MARGIN_LEFT + pw,
                MARGIN_LEFT - 6.0,
                py + 4.0,
                escape(&tick_label(y, ystep))
            );
            y += ystep;
        }
        let mut x = (x0 / xstep).ceil() * xstep;
        while x <= x1 + xstep * 1e-9 {
            let px = sx(x);
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" y1="{MARGIN_TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                MARGIN_TOP + ph,
                MARGIN_TOP + ph + 18.0,
                escape(&tick_label(x, xstep))
            );
            x += xstep;
        }
        let _ = writeln!(
            s,
            r#"<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            MARGIN_LEFT + pw / 2.0,
            HEIGHT - 10.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
            MARGIN_TOP + ph / 2.0,
            MARGIN_TOP + ph / 2.0,
            escape(&self.y_label)
        );
        // Lines: a missing value ends one polyline; the next value starts another.
        for (i, ser) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut run: Vec<String> = Vec::new();
            let flush = |run: &mut Vec<String>, s: &mut String| {
                if run.len() == 1 {
                    let (cx, cy) = run[0].split_once(',').unwrap_or(("0", "0"));
                    let _ = writeln!(s, r#"<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>"#);
                } else if run.len() > 1 {
                    let _ = writeln!(
                        s,
                        r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
                        run.join(" ")
                    );
                }
                run.clear();
            };
            for &(x, y) in &ser.points {
                match y.filter(|v| v.is_finite() && x.is_finite()) {
                    Some(y) => run.push(format!("{:.1},{:.1}", sx(x), sy(y))),
                    None => flush(&mut run, &mut s),
                }
            }
            flush(&mut run, &mut s);
            let ly = MARGIN_TOP + 10.0 + i as f64 * 18.0;
            let lx = MARGIN_LEFT + pw + 12.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 18.0,
                lx + 24.0,
                ly + 4.0,
                escape(&ser.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal well-formedness check: every tag closes in order, every
    /// attribute value is quoted, and no raw '&' or '<' appears in text.
    pub(crate) fn well_formed(svg: &str) -> Result<(), String> {
        let body = svg
            .strip_prefix(r#"<?xml version="1.0" encoding="UTF-8"?>"#)
            .ok_or("no XML declaration")?;
        let mut stack: Vec<String> = Vec::new();
        let mut rest = body;
        let mut root_seen = false;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            if text.contains('>') {
                return Err(format!("stray '>' in text {text:?}"));
            }
            for (i, _) in text.match_indices('&') {
                let ent = &text[i..];
                if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| ent.starts_with(e))
                {
                    return Err(format!("raw '&' in {text:?}"));
                }
            }
            let close = rest[open..].find('>').ok_or("unclosed tag")? + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let top = stack
                    .pop()
                    .ok_or(format!("close of {name} with nothing open"))?;
                if top != name {
                    return Err(format!("</{name}> closes <{top}>"));
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let inner = tag.trim_end_matches('/');
            let name = inner.split_whitespace().next().ok_or("empty tag")?;
            if stack.is_empty() {
                if root_seen {
                    return Err("two root elements".into());
                }
                root_seen = true;
            }
            // Attributes: name="value" pairs with no '<' inside.
            let attrs = inner[name.len()..].trim();
            let mut a = attrs;
            while !a.is_empty() {
                let eq = a
                    .find("=\"")
                    .ok_or(format!("unquoted attribute in <{tag}>"))?;
                let after = &a[eq + 2..];
                let end = after.find('"').ok_or("unterminated attribute")?;
                if after[..end].contains('<') {
                    return Err("'<' in an attribute".into());
                }
                a = after[end + 1..].trim_start();
            }
            if !self_closing {
                stack.push(name.to_string());
            }
        }
        if !stack.is_empty() {
            return Err(format!("unclosed {stack:?}"));
        }
        if !rest.trim().is_empty() {
            return Err("text after the root".into());
        }
        Ok(())
    }

    #[test]
    fn renders_well_formed_svg_with_gaps_and_escaped_text() {
        let chart = Chart {
            title: "latency <trade & quote>".into(),
            x_label: "seconds".into(),
            y_label: "ms".into(),
            series: vec![
                Series {
                    name: "trade \"max\"".into(),
                    points: vec![
                        (0.0, Some(1.0)),
                        (1.0, None),
                        (2.0, Some(3.0)),
                        (3.0, Some(2.5)),
                    ],
                },
                Series {
                    name: "quote".into(),
                    points: vec![(0.0, Some(0.5)), (3.0, Some(f64::NAN))],
                },
            ],
        };
        let svg = chart.to_svg();
        well_formed(&svg).unwrap();
        assert!(svg.contains("latency &lt;trade &amp; quote&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 1, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
        // Empty and flat charts still render.
        let empty = Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![],
        };
        well_formed(&empty.to_svg()).unwrap();
        let flat = Chart {
            series: vec![Series {
                name: "a".into(),
                points: vec![(5.0, Some(7.0)), (5.0, Some(7.0))],
            }],
            ..empty
        };
        well_formed(&flat.to_svg()).unwrap();
        assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><a><b></a>").is_err());
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(10.0, 5), 2.0);
        assert_eq!(nice_step(0.7, 6), 0.2);
        assert_eq!(nice_step(1234.0, 6), 500.0);
        assert_eq!(nice_step(0.0, 6), 1.0);
        assert_eq!(tick_label(0.30000000000000004, 0.1), "0.3");
    }
}

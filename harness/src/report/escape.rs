//! Escaping for the reports that write markup (`report.html` and the SVG charts inside it):
//! text content and quoted attribute values, HTML5 and XML alike. quick-xml's escaper
//! replaces all five of `<`, `>`, `&`, `'` and `"`, so one function serves text and
//! attributes in either kind of quotes. (`junit.xml` is escaped by quick-junit itself.)

use std::borrow::Cow;

/// `s` with `<`, `>`, `&`, `'` and `"` replaced by entity references; borrowed when there is
/// nothing to replace.
pub fn esc(s: &str) -> Cow<'_, str> {
    quick_xml::escape::escape(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_both_quotes_are_escaped() {
        assert_eq!(esc(r#"<a href="x" title='y'>&amp;</a>"#), "&lt;a href=&quot;x&quot; title=&apos;y&apos;&gt;&amp;amp;&lt;/a&gt;");
        assert_eq!(esc("<>&\"'"), "&lt;&gt;&amp;&quot;&apos;");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let s = "lost_write at byte 4096 (+512): µs, naïve, 日本";
        assert!(matches!(esc(s), Cow::Borrowed(b) if b == s));
    }

    #[test]
    fn escaped_text_reads_back_as_the_original() {
        let s = "p99 < 1 ms & \"quoted\" 'single' >";
        assert_eq!(quick_xml::escape::unescape(&esc(s)).unwrap(), s);
    }
}

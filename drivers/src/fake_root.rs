//! Tests only: a fake filesystem tree (sysfs, `/dev`) under a temporary directory, removed on
//! drop, for code that takes its roots as parameters.

use std::path::PathBuf;

pub(crate) struct FakeRoot(pub PathBuf);

impl FakeRoot {
    pub fn new(tag: &str) -> FakeRoot {
        let d = std::env::temp_dir().join(format!("faultline-fake-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        FakeRoot(d)
    }

    /// Writes `content` at the root-relative `rel`, creating its directories.
    pub fn file(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    pub fn dir(&self, rel: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.0.join(rel)).unwrap()
    }

    /// `link` (relative to the root) pointing at the root-relative `target`.
    pub fn link(&self, link: &str, target: &str) {
        let l = self.0.join(link);
        std::fs::create_dir_all(l.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(self.0.join(target), l).unwrap();
    }
}

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

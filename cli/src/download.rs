//! A progress bar for models fetched from the Hugging Face hub.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kivi_engine::hub::{DownloadEvent, ProgressSink};

/// Shows a download's overall progress on stderr.
pub fn progress_bar() -> ProgressSink {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "download {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} ({eta}) {msg}",
        )
        .expect("valid template"),
    );
    ProgressSink::new(move |event| match event {
        DownloadEvent::Planned {
            total_bytes,
            cached_bytes,
            ..
        } => {
            bar.set_length(total_bytes);
            bar.set_position(cached_bytes);
        }
        DownloadEvent::FileStarted { file, .. } => bar.set_message(file),
        DownloadEvent::Progress { overall, .. } => bar.set_position(overall.done),
        DownloadEvent::Finished { .. } => bar.finish_and_clear(),
        _ => {}
    })
}

//! The timeline's image, painted into an RGBA buffer in the engine and put on the page's canvas
//! with one `putImageData`.
//!
//! One `fillRect` per run of equal columns was up to 48,000 calls into the canvas per draw at
//! 24 lanes of 1,000 columns (40 ms of each 50-80 ms task at 512 sources, measured); writing the
//! same rectangles into a buffer costs a pass over its pixels, and happens in the worker. The
//! exit shading and hatching, markers and axis ticks are pixels too; only text (axis labels,
//! "A exits") is left to the page, as elements over the canvas.

/// An RGB colour from a CSS `#rrggbb` string (every colour `classes` hands out); anything else
/// is a mid grey, visibly not a class colour.
pub fn rgb(css: &str) -> [u8; 3] {
    let hex = css.strip_prefix('#').filter(|h| h.len() == 6);
    let channel = |i: usize| hex.and_then(|h| u8::from_str_radix(&h[i..i + 2], 16).ok());
    match (channel(0), channel(2), channel(4)) {
        (Some(r), Some(g), Some(b)) => [r, g, b],
        _ => [128, 128, 128],
    }
}

/// Device pixels for an area given in CSS pixels: the whole canvas, or a band of its rows
/// ([`Pixels::band`]).
pub struct Pixels {
    width: usize,
    height: usize,
    /// The canvas row this buffer's first row is.
    first_row: usize,
    /// Device pixels per CSS pixel.
    scale: f64,
    rgba: Vec<u8>,
}

impl std::fmt::Debug for Pixels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pixels({} x {} device pixels at {}x)", self.width, self.height, self.scale)
    }
}

impl Pixels {
    pub fn new(css_width: f64, css_height: f64, device_pixel_ratio: f64) -> Pixels {
        let scale = if device_pixel_ratio > 0.0 { device_pixel_ratio } else { 1.0 };
        let width = (css_width.max(0.0) * scale) as usize;
        let height = (css_height.max(0.0) * scale) as usize;
        Pixels { width, height, first_row: 0, scale, rgba: vec![0; width * height * 4] }
    }

    /// The canvas's device rows from CSS `y0` to `y1` alone: what is painted in it lands on the
    /// pixels it would on the whole canvas, and the rest is clipped. A lane painted in a band by
    /// one engine worker and put on the canvas by another ([`Pixels::put_band`]) is the lane
    /// painted on the canvas.
    pub fn band(css_width: f64, (y0, y1): (f64, f64), device_pixel_ratio: f64) -> Pixels {
        let scale = if device_pixel_ratio > 0.0 { device_pixel_ratio } else { 1.0 };
        let width = (css_width.max(0.0) * scale) as usize;
        let (first_row, end) = (device_row(y0, scale), device_row(y1, scale));
        let height = end.saturating_sub(first_row);
        Pixels { width, height, first_row, scale, rgba: vec![0; width * height * 4] }
    }

    /// The canvas row of this buffer's first row.
    pub fn first_row(&self) -> usize {
        self.first_row
    }

    /// Puts a band's pixels (`rgba`, whole rows from canvas row `first_row` on) on this
    /// canvas; what falls outside it is dropped.
    pub fn put_band(&mut self, first_row: usize, rgba: &[u8]) {
        let row_bytes = self.width * 4;
        if row_bytes == 0 || first_row >= self.height {
            return;
        }
        let rows = (rgba.len() / row_bytes).min(self.height - first_row);
        let at = first_row * row_bytes;
        self.rgba[at..at + rows * row_bytes].copy_from_slice(&rgba[..rows * row_bytes]);
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    #[cfg(test)]
    pub fn rgba(&self) -> &[u8] {
        &self.rgba
    }

    /// The buffer, for sending.
    pub fn into_rgba(self) -> Vec<u8> {
        self.rgba
    }

    /// Device pixels of this buffer covered by a rectangle in the canvas's CSS pixels:
    /// `(x0, x1, y0, y1)`, clipped; a rectangle thinner than a device pixel still covers one, as
    /// `fillRect` would show it.
    fn device_rect(&self, x: f64, y: f64, w: f64, h: f64) -> Option<(usize, usize, usize, usize)> {
        let span = |from: f64, len: f64, min: usize, max: usize| {
            let a = (from * self.scale).round();
            let b = ((from + len) * self.scale).round().max(a + 1.0);
            let clamp = |v: f64| (v.max(0.0) as usize).clamp(min, max) - min;
            (clamp(a), clamp(b))
        };
        let (x0, x1) = span(x, w, 0, self.width);
        let (y0, y1) = span(y, h, self.first_row, self.first_row + self.height);
        (x0 < x1 && y0 < y1).then_some((x0, x1, y0, y1))
    }

    /// Lays `colour` at `alpha` over a rectangle in CSS pixels (what `fillRect` with an
    /// `rgba()` fill does).
    pub fn blend(&mut self, x: f64, y: f64, w: f64, h: f64, colour: [u8; 3], alpha: f64) {
        let Some((x0, x1, y0, y1)) = self.device_rect(x, y, w, h) else { return };
        for row in y0..y1 {
            let start = (row * self.width + x0) * 4;
            for px in self.rgba[start..start + (x1 - x0) * 4].chunks_exact_mut(4) {
                mix(px, colour, alpha);
            }
        }
    }

    /// Hatches a rectangle in CSS pixels (`[x, y, w, h]`) with lines rising to the right, one
    /// device pixel wide and `spacing` CSS pixels apart, laid over at `alpha`. The lines run on
    /// across rectangles (their phase is the canvas's), so hatching several lanes reads as one
    /// pattern.
    pub fn hatch(&mut self, [x, y, w, h]: [f64; 4], spacing: f64, colour: [u8; 3], alpha: f64) {
        let Some((x0, x1, y0, y1)) = self.device_rect(x, y, w, h) else { return };
        let period = ((spacing * self.scale).round() as usize).max(2);
        for row in y0..y1 {
            for col in x0..x1 {
                // The canvas's row: a band hatches in phase with its neighbours.
                if (col + self.first_row + row).is_multiple_of(period) {
                    let i = (row * self.width + col) * 4;
                    mix(&mut self.rgba[i..i + 4], colour, alpha);
                }
            }
        }
    }

    /// Fills a rectangle in CSS pixels, opaque, clipped to the area; a rectangle thinner than a
    /// device pixel still covers one, as `fillRect` would show it.
    pub fn fill(&mut self, x: f64, y: f64, w: f64, h: f64, colour: [u8; 3]) {
        let Some((x0, x1, y0, y1)) = self.device_rect(x, y, w, h) else { return };
        let pixel = [colour[0], colour[1], colour[2], 255];
        for row in y0..y1 {
            let start = (row * self.width + x0) * 4;
            for px in self.rgba[start..start + (x1 - x0) * 4].chunks_exact_mut(4) {
                px.copy_from_slice(&pixel);
            }
        }
    }
}

/// The device row a CSS `y` falls on, as [`Pixels`] rounds it.
pub fn device_row(y: f64, scale: f64) -> usize {
    (y * scale).round().max(0.0) as usize
}

/// One pixel with `colour` laid over it at `alpha`, opaque after.
fn mix(px: &mut [u8], colour: [u8; 3], alpha: f64) {
    for (c, over) in px.iter_mut().zip(colour) {
        *c = (f64::from(*c) * (1.0 - alpha) + f64::from(over) * alpha).round() as u8;
    }
    px[3] = 255;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(p: &Pixels, x: usize, y: usize) -> [u8; 4] {
        let i = (y * p.width() + x) * 4;
        p.rgba()[i..i + 4].try_into().unwrap()
    }

    #[test]
    fn rectangles_land_on_the_device_pixels_fill_rect_would_cover() {
        let mut p = Pixels::new(10.0, 4.0, 2.0);
        assert_eq!((p.width(), p.height()), (20, 8));
        p.fill(0.0, 0.0, 10.0, 4.0, rgb("#0d1117"));
        p.fill(2.0, 1.0, 3.0, 2.0, rgb("#d55e00"));
        assert_eq!(at(&p, 0, 0), [0x0d, 0x11, 0x17, 255]);
        assert_eq!(at(&p, 4, 2), [0xd5, 0x5e, 0x00, 255], "x 2..5, y 1..3 in CSS pixels is 4..10, 2..6");
        assert_eq!(at(&p, 9, 5), [0xd5, 0x5e, 0x00, 255]);
        assert_eq!(at(&p, 10, 5), [0x0d, 0x11, 0x17, 255]);
        assert_eq!(at(&p, 4, 6), [0x0d, 0x11, 0x17, 255]);
        // Thinner than a device pixel still shows; outside the area is clipped, not a panic.
        p.fill(7.1, 3.0, 0.1, 0.2, rgb("#ffffff"));
        assert_eq!(at(&p, 14, 6), [255, 255, 255, 255]);
        p.fill(-5.0, -5.0, 100.0, 1.0, rgb("#ffffff"));
        p.fill(50.0, 50.0, 3.0, 3.0, rgb("#ffffff"));
        assert_eq!(at(&p, 19, 0), [0x0d, 0x11, 0x17, 255], "entirely outside: nothing");
        p.fill(-5.0, 0.0, 100.0, 1.0, rgb("#010203"));
        assert_eq!(at(&p, 19, 1), [1, 2, 3, 255], "partly outside: clipped");
        assert_eq!(rgb("rgba(1, 2, 3, 0.5)"), [128, 128, 128]);
    }

    #[test]
    fn shading_mixes_and_hatching_draws_rising_lines() {
        let mut p = Pixels::new(16.0, 16.0, 1.0);
        p.fill(0.0, 0.0, 16.0, 16.0, [200, 100, 0]);
        p.blend(0.0, 0.0, 8.0, 16.0, [0, 0, 0], 0.5);
        assert_eq!(at(&p, 0, 0), [100, 50, 0, 255]);
        assert_eq!(at(&p, 8, 0), [200, 100, 0, 255], "outside the rectangle: untouched");
        p.hatch([8.0, 0.0, 8.0, 16.0], 8.0, [255, 255, 255], 1.0);
        assert_eq!(at(&p, 8, 0), [255, 255, 255, 255], "8 + 0 is on a line");
        assert_eq!(at(&p, 15, 1), [255, 255, 255, 255], "so is 15 + 1: the line rises to the right");
        assert_eq!(at(&p, 9, 0), [200, 100, 0, 255]);
        assert_eq!(at(&p, 7, 1), [100, 50, 0, 255], "left of the hatched rectangle: untouched");
    }

    /// Paints the same rectangles on a canvas, and in bands of it put together.
    #[test]
    fn bands_put_together_are_the_canvas_painted_whole() {
        let paint = |p: &mut Pixels| {
            p.fill(0.0, 0.0, 10.0, 7.0, [1, 2, 3]);
            for (i, y) in [0.3, 1.7, 2.45, 3.5, 5.2].into_iter().enumerate() {
                p.fill(i as f64, y, 3.3, 1.4, [10 * i as u8, 7, 200]);
            }
            p.hatch([0.0, 0.0, 10.0, 7.0], 2.0, [255, 255, 255], 0.5);
        };
        for dpr in [1.0, 1.5, 2.0] {
            let mut whole = Pixels::new(10.0, 7.0, dpr);
            paint(&mut whole);
            let mut put = Pixels::new(10.0, 7.0, dpr);
            for band in [(0.0, 2.3), (2.3, 4.9), (4.9, 7.0)] {
                let mut b = Pixels::band(10.0, band, dpr);
                paint(&mut b);
                put.put_band(b.first_row(), b.rgba());
            }
            assert_eq!(put.rgba(), whole.rgba(), "at {dpr}x");
        }
    }
}

//! Documents attached to a chat: their metadata, extracted text and prefill flag.

use rusqlite::types::Type;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};

use super::rows::{parse_id, require_chat, to_sql_int, touch};
use super::types::{DocumentInfo, DocumentKind};
use super::{Result, Store, StoreError};

/// A document to attach: what `attach_document` read and counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDocument {
    /// File name, no directories.
    pub name: String,
    /// Absolute path it was read from.
    pub path: String,
    /// What kind of file it was.
    pub kind: DocumentKind,
    /// File size.
    pub size_bytes: u64,
    /// Tokens of `text` (the active model's tokenizer).
    pub token_count: u64,
    /// The extracted text.
    pub text: String,
}

/// Every column but `text`, which is read only when asked for.
const COLUMNS: &str = "id, chat_id, name, path, kind, size_bytes, token_count, prefilled, added_at";

fn document_from_row(row: &Row<'_>) -> rusqlite::Result<DocumentInfo> {
    let kind: String = row.get(4)?;
    Ok(DocumentInfo {
        id: row.get::<_, i64>(0)?.to_string(),
        chat_id: row.get::<_, i64>(1)?.to_string(),
        name: row.get(2)?,
        path: row.get(3)?,
        kind: DocumentKind::parse(&kind).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                4,
                Type::Text,
                format!("unknown document kind {kind:?}").into(),
            )
        })?,
        size_bytes: row.get::<_, i64>(5)? as u64,
        token_count: row.get::<_, i64>(6)? as u64,
        fits_in_context: true,
        context_length: 0,
        context_needed: 0,
        kv_bytes: None,
        kv_fp16_bytes: None,
        read_seconds: None,
        prefilled: row.get(7)?,
        added_at: row.get::<_, i64>(8)? as u64,
    })
}

/// A chat's documents in attach order.
pub(crate) fn list(conn: &Connection, chat: i64) -> Result<Vec<DocumentInfo>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM documents WHERE chat_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt.query_map([chat], document_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn get(conn: &Connection, document: i64, id: &str) -> Result<DocumentInfo> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM documents WHERE id = ?1"),
        [document],
        document_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("document", id))
}

impl Store {
    /// Attaches a document to a chat (not prefilled). `fits_in_context` is left for the
    /// caller to compute with [`super::apply_context_fit`].
    pub fn add_document(&self, chat_id: &str, doc: &NewDocument) -> Result<DocumentInfo> {
        let chat = parse_id("chat", chat_id)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        tx.execute(
            "INSERT INTO documents
                 (chat_id, name, path, kind, size_bytes, token_count, added_at, prefilled, text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)",
            params![
                chat,
                doc.name,
                doc.path,
                doc.kind.as_str(),
                to_sql_int(doc.size_bytes),
                to_sql_int(doc.token_count),
                now as i64,
                doc.text,
            ],
        )?;
        let id = tx.last_insert_rowid();
        touch(&tx, chat, now)?;
        let info = get(&tx, id, &id.to_string())?;
        tx.commit()?;
        Ok(info)
    }

    /// Detaches a document from a chat.
    pub fn remove_document(&self, chat_id: &str, document_id: &str) -> Result<()> {
        let chat = parse_id("chat", chat_id)?;
        let document = parse_id("document", document_id)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        let deleted = tx.execute(
            "DELETE FROM documents WHERE id = ?1 AND chat_id = ?2",
            params![document, chat],
        )?;
        if deleted == 0 {
            return Err(StoreError::not_found("document", document_id));
        }
        touch(&tx, chat, now)?;
        tx.commit()?;
        Ok(())
    }

    /// A chat's documents in attach order.
    pub fn list_documents(&self, chat_id: &str) -> Result<Vec<DocumentInfo>> {
        let chat = parse_id("chat", chat_id)?;
        let conn = self.conn();
        require_chat(&conn, chat, chat_id)?;
        list(&conn, chat)
    }

    /// One document's metadata.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn get_document(&self, document_id: &str) -> Result<DocumentInfo> {
        let document = parse_id("document", document_id)?;
        get(&self.conn(), document, document_id)
    }

    /// A document's extracted text (what is prefilled).
    pub fn document_text(&self, document_id: &str) -> Result<String> {
        let document = parse_id("document", document_id)?;
        self.conn()
            .query_row(
                "SELECT text FROM documents WHERE id = ?1",
                [document],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| StoreError::not_found("document", document_id))
    }

    /// Sets the `prefilled` flag of some of a chat's documents; ids of other chats' or
    /// deleted documents are skipped. Returns how many changed.
    pub fn set_documents_prefilled(
        &self,
        chat_id: &str,
        document_ids: &[String],
        prefilled: bool,
    ) -> Result<usize> {
        let chat = parse_id("chat", chat_id)?;
        let ids: Vec<i64> = document_ids
            .iter()
            .filter_map(|id| parse_id("document", id).ok())
            .collect();
        if ids.is_empty() {
            return Ok(0);
        }
        let placeholders = vec!["?"; ids.len()].join(", ");
        let sql = format!(
            "UPDATE documents SET prefilled = {} WHERE chat_id = {chat} AND id IN ({placeholders})",
            i64::from(prefilled)
        );
        Ok(self.conn().execute(&sql, params_from_iter(ids))?)
    }

    /// A chat's cache was dropped (`Some`) or every cache was (`None`): no document is
    /// prefilled any more. Returns how many changed.
    pub fn clear_prefilled(&self, chat_id: Option<&str>) -> Result<usize> {
        let conn = self.conn();
        Ok(match chat_id {
            Some(chat_id) => {
                let chat = parse_id("chat", chat_id)?;
                conn.execute(
                    "UPDATE documents SET prefilled = 0 WHERE chat_id = ?1 AND prefilled = 1",
                    [chat],
                )?
            }
            None => conn.execute("UPDATE documents SET prefilled = 0 WHERE prefilled = 1", [])?,
        })
    }

    /// Records a new token count (after the active model, and so the tokenizer, changed).
    pub fn set_document_token_count(&self, document_id: &str, token_count: u64) -> Result<()> {
        let document = parse_id("document", document_id)?;
        let changed = self.conn().execute(
            "UPDATE documents SET token_count = ?2 WHERE id = ?1",
            params![document, to_sql_int(token_count)],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("document", document_id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &str, tokens: u64) -> NewDocument {
        NewDocument {
            name: name.into(),
            path: format!("/home/me/{name}"),
            kind: if name.ends_with(".pdf") {
                DocumentKind::Pdf
            } else {
                DocumentKind::Txt
            },
            size_bytes: 1234,
            token_count: tokens,
            text: format!("text of {name}"),
        }
    }

    #[test]
    fn attach_list_prefill_and_remove() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        let a = store.add_document(&chat.id, &doc("a.txt", 10)).unwrap();
        let b = store.add_document(&chat.id, &doc("b.pdf", 20)).unwrap();
        assert_eq!(a.name, "a.txt");
        assert_eq!(a.path, "/home/me/a.txt");
        assert_eq!(b.kind, DocumentKind::Pdf);
        assert_eq!(a.size_bytes, 1234);
        assert_eq!(b.token_count, 20);
        assert!(!a.prefilled && a.added_at > 0);
        assert_eq!(store.document_text(&b.id).unwrap(), "text of b.pdf");

        let listed = store.list_documents(&chat.id).unwrap();
        assert_eq!(
            listed.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["a.txt", "b.pdf"]
        );
        assert_eq!(store.get_chat(&chat.id).unwrap().documents, listed);

        let other = store.create_chat(None, None).unwrap();
        let c = store.add_document(&other.id, &doc("c.md", 5)).unwrap();
        // c belongs to another chat: skipped.
        let n = store
            .set_documents_prefilled(
                &chat.id,
                &[a.id.clone(), b.id.clone(), c.id.clone(), "zz".into()],
                true,
            )
            .unwrap();
        assert_eq!(n, 2);
        assert!(store.get_document(&a.id).unwrap().prefilled);
        assert!(!store.get_document(&c.id).unwrap().prefilled);
        store
            .set_documents_prefilled(&other.id, std::slice::from_ref(&c.id), true)
            .unwrap();
        assert_eq!(store.clear_prefilled(Some(&chat.id)).unwrap(), 2);
        assert!(store.get_document(&c.id).unwrap().prefilled);
        assert_eq!(store.clear_prefilled(None).unwrap(), 1);

        store.set_document_token_count(&a.id, 11).unwrap();
        assert_eq!(store.get_document(&a.id).unwrap().token_count, 11);

        assert!(matches!(
            store.remove_document(&other.id, &a.id),
            Err(StoreError::NotFound {
                what: "document",
                ..
            })
        ));
        store.remove_document(&chat.id, &a.id).unwrap();
        assert!(matches!(
            store.document_text(&a.id),
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(store.list_documents(&chat.id).unwrap().len(), 1);
        assert!(store.remove_document(&chat.id, &a.id).is_err());
        assert!(matches!(
            store.add_document("404", &doc("x.txt", 1)),
            Err(StoreError::NotFound { what: "chat", .. })
        ));
    }

    #[test]
    fn deleting_a_chat_cascades() {
        let store = Store::open_in_memory().unwrap();
        let keep = store.create_chat(Some("keep"), None).unwrap();
        let gone = store.create_chat(Some("gone"), None).unwrap();
        for chat in [&keep, &gone] {
            store.begin_send(&chat.id, "q").unwrap();
            store.add_document(&chat.id, &doc("d.txt", 3)).unwrap();
        }
        let gone_doc = store.list_documents(&gone.id).unwrap()[0].id.clone();
        let gone_msgs = store.messages(&gone.id).unwrap();
        store.delete_chat(&gone.id).unwrap();

        let count = |table: &str| -> i64 {
            store
                .conn()
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(count("chats"), 1);
        assert_eq!(count("messages"), 2);
        assert_eq!(count("documents"), 1);
        assert!(store.document_text(&gone_doc).is_err());
        for m in gone_msgs {
            assert!(store.get_message(&m.id).is_err());
        }
        assert!(store.get_chat(&gone.id).is_err());
        assert_eq!(store.get_chat(&keep.id).unwrap().message_count, 2);
        // Ids are never reused.
        let next = store.create_chat(None, None).unwrap();
        assert!(next.id.parse::<i64>().unwrap() > gone.id.parse::<i64>().unwrap());
    }
}
